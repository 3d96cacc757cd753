"""The scheduled sweeper: finds due rows whose wake-up call was lost (a crash, a lost SQS
message, a restart of the local stack) and enqueues them again. Due rows are every tenant's:
it reads them across tenants (db/tenancy.py, "sweeper"), as does the queue lag it measures.
Each sweep also gives the reputation guard its turn (services/reputation/guard.review)."""
from __future__ import annotations

import logging
from typing import cast

from chalicelib import clock, observability, queues
from chalicelib.config import get_settings
from chalicelib.db import session_scope, tenancy
from chalicelib.services.reputation import guard
from chalicelib.workers.registry import load_workers

log = logging.getLogger(__name__)

BATCH = 500


def sweep(grace_seconds: float = 60.0) -> dict[str, int]:
    """Enqueue every row due for at least ``grace_seconds``; returns counts per queue."""
    counts: dict[str, int] = {}
    for queue, worker in load_workers().items():
        with session_scope() as db, tenancy.across_tenants(db, "sweeper"):
            ids = worker.find_due(db, BATCH, grace_seconds)
        for row_id in ids:
            queues.enqueue(queue, row_id)
        counts[queue] = len(ids)
        if ids:
            observability.log("sweeper.requeued", "warning", queue=queue, rows=len(ids))
    if get_settings().metrics_backend == "emf":  # locally GET /metrics reads it when scraped
        observability.gauge_queue_lag(queue_lags())
    # Servers whose window moves on without new bounces (a warning ends, a rate rises)
    guard.review()
    return counts


def queue_lags() -> dict[str, float]:
    """Seconds the oldest due, unclaimed row of each queue has waited (0: none waits): the
    queue lag metric. Read from the rows (the truth), not from SQS."""
    from chalicelib.db.models import Message, WebhookRequest

    models: dict[str, type[Message | WebhookRequest]] = {
        queues.DELIVERIES: Message, queues.INBOUND: Message, queues.WEBHOOKS: WebhookRequest}
    lags: dict[str, float] = {}
    now = clock.now()
    with session_scope() as db, tenancy.across_tenants(db, "sweeper"):
        for queue, worker in load_workers().items():
            if queue not in models:  # a queue whose rows this does not know: no figure
                continue
            # a read: the oldest due, unclaimed row, woken or not, and nothing marked woken
            # (a mark would hold the sweeper off a row whose wake-up was lost)
            ids = worker.find_due(db, 1, 0.0, sweeping=False)
            row = cast("Message | WebhookRequest | None",  # (mypy joins the two to Base)
                       db.get(models[queue], ids[0]) if ids else None)  # None: gone since
            due = row.next_attempt_at if row is not None else None
            lags[queue] = max(0.0, (now - due).total_seconds()) if due else 0.0
    return lags
