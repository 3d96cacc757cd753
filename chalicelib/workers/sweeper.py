"""The scheduled sweeper: finds due rows whose wake-up call was lost (a crash, a lost SQS
message, a restart of the local stack) and enqueues them again."""
from __future__ import annotations

import logging

from chalicelib import queues
from chalicelib.db import session_scope
from chalicelib.workers.registry import load_workers

log = logging.getLogger(__name__)

BATCH = 500


def sweep(grace_seconds: float = 60.0) -> dict[str, int]:
    """Enqueue every row due for at least ``grace_seconds``; returns counts per queue."""
    counts: dict[str, int] = {}
    for queue, worker in load_workers().items():
        with session_scope() as db:
            ids = worker.find_due(db, BATCH, grace_seconds)
        for row_id in ids:
            queues.enqueue(queue, row_id)
        counts[queue] = len(ids)
        if ids:
            log.info("sweeper re-enqueued %d %s rows", len(ids), queue)
    return counts
