"""The hourly retention run (AWS schedule; the local stack calls it on its own timer). Expired
rows are every tenant's: it prunes across tenants (db/tenancy.py, "retention")."""
from __future__ import annotations

import logging

from chalicelib.db import session_scope, tenancy
from chalicelib.services.messages import retention

log = logging.getLogger(__name__)


def run(max_batches: int = 20) -> dict[str, int]:
    """Prune in committed batches until nothing is left or ``max_batches`` ran (one run must
    stay well inside the function timeout; the next run continues)."""
    totals: dict[str, int] = {}
    for _ in range(max_batches):
        with session_scope() as db, tenancy.across_tenants(db, "retention"):
            counts = retention.prune(db)
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + count
        if not any(count >= retention.BATCH for count in counts.values()):
            break
    if any(totals.values()):
        log.info("retention pruned %s", totals)
    return totals
