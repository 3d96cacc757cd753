"""The bulk worker (queue "bulk"): one wake-up -> chunks of a bulk job for up to
BULK_TIME_BUDGET_SECONDS, then it re-enqueues the job (well inside the Lambda timeout).

Steps: claim the job row (claims.claim, like every worker: a duplicate wake-up does nothing);
per chunk, in ONE transaction: the next BULK_CHUNK_SIZE matching message ids after the
cursor, the action on them, the cursor and counts moved (and the claim renewed) only while
the claim is still ours -- else the chunk rolls back. The chunk's queue wake-ups go out after
its commit. A worker that dies leaves the claim to expire (CLAIM_TIMEOUT_SECONDS); the
sweeper then wakes the job and the next worker resumes after the last committed chunk.
"""
from __future__ import annotations

import logging
import time

from chalicelib import clock, queues
from chalicelib.config import get_settings
from chalicelib.db import session_scope
from chalicelib.db.models import BulkJob
from chalicelib.services.messages import bulk as bulk_actions
from chalicelib.db import claims
from chalicelib.queues import SQS_MAX_DELAY
from chalicelib.workers.registry import QueueWorker, register

log = logging.getLogger(__name__)

QUEUE = bulk_actions.QUEUE
ACTIVE = (bulk_actions.QUEUED, bulk_actions.RUNNING)


def process(job_id: int) -> str:
    worker = claims.worker_id()
    settings = get_settings()
    deadline = time.monotonic() + settings.bulk_time_budget_seconds
    with session_scope() as db:
        if not claims.claim(db, BulkJob, job_id, worker, BulkJob.status.in_(ACTIVE)):
            job = db.get(BulkJob, job_id)
            if job is None or job.status not in ACTIVE or job.next_attempt_at is None:
                return "nothing-to-do"
            wait = (job.next_attempt_at - clock.now()).total_seconds()
            if wait > 0:
                queues.enqueue_after_commit(db, QUEUE, job_id, min(wait, SQS_MAX_DELAY))
                return "early"
            return "claimed-elsewhere"
        while True:
            outcome = _chunk(db, job_id, worker, settings.bulk_chunk_size)
            if outcome != "more":
                return outcome
            if time.monotonic() > deadline:
                job = db.get(BulkJob, job_id)
                if claims.release(job, worker):
                    job.next_attempt_at = clock.now()
                    queues.enqueue_after_commit(db, QUEUE, job_id)
                db.commit()
                return "paused"


def _chunk(db, job_id: int, worker: str, size: int) -> str:
    """One chunk in one transaction; "more", "done" or "lost-claim"."""
    job = db.get(BulkJob, job_id)
    db.refresh(job)
    ids = bulk_actions.next_chunk(db, job, size)
    if not ids:
        finished = bulk_actions.finish(db, job_id, worker)
        db.commit()
        return "done" if finished else "lost-claim"
    changed = bulk_actions.apply(db, job, ids)
    if not bulk_actions.advance(db, job_id, worker, ids[-1], changed, len(ids) - changed):
        db.rollback()
        db.info.pop("after_commit", None)  # nothing of the chunk happened
        log.warning("bulk job %s: claim lost; another worker carries on", job_id)
        return "lost-claim"
    db.commit()
    # The chunk's delivery wake-ups now, not when the whole wake-up ends.
    for callback in db.info.pop("after_commit", []):
        callback()
    return "more"


def find_due(db, limit: int, grace: float) -> list[int]:
    return claims.due_ids(db, BulkJob, limit, grace, BulkJob.status.in_(ACTIVE))


register(QueueWorker(QUEUE, process=process, find_due=find_due))
