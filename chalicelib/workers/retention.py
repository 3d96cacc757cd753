"""The hourly retention run (AWS schedule; the local stack calls it on its own timer). Expired
rows are every tenant's: it prunes across tenants (db/tenancy.py, "retention")."""
from __future__ import annotations

import logging

from chalicelib.config import get_settings
from chalicelib.db import session_scope, tenancy
from chalicelib.services import content
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
    totals.update(content_upkeep(max_batches))
    if any(totals.values()):
        log.info("retention pruned %s", totals)
    return totals


def content_upkeep(max_batches: int = 20) -> dict[str, int]:
    """The content store's share of the run: move rows written before it into it (the
    backfill, in committed batches, resumed by the next run), then delete objects no row
    names (the orphan sweep)."""
    settings = get_settings()
    moved = 0
    for _ in range(max_batches):
        with session_scope() as db:
            done = content.backfill(db, limit=settings.content_backfill_batch)
        moved += done
        if done < settings.content_backfill_batch:
            break
    with session_scope() as db:
        swept = content.sweep(db, grace_hours=settings.content_sweep_grace_hours)
    return {"content_backfilled": moved, "content_swept": swept}
