"""The delivery queue's entry points: one wake-up, a batch of wake-ups, and the due rows the
sweeper wakes again. Each wake-up names a message; at most one SMTP attempt follows it.

A wake-up is claimed first (``claim.py``: due, unclaimed, still Pending, SoftFail or
Scheduled), so a duplicate wake-up or a racing worker does nothing; the claimed message then
goes through the steps of ``attempt.py``; a batch shares one claim and lets outcomes ride on
the next message's marker (``batch.py``).
"""
from __future__ import annotations

import logging

from chalicelib.db import claims, session_scope
from chalicelib.services.delivery import attempt, batch, claim, pacing
from chalicelib.services.delivery.claim import find_due  # noqa: F401  (the sweeper's)
from chalicelib.services.delivery.recorder import Recorder

log = logging.getLogger(__name__)


def process(message_id: int) -> str:
    """Handle one wake-up; returns what happened (for tests and logs)."""
    worker = claims.worker_id()
    with session_scope() as db:
        # Claim first (the common case is a due row): only a failed claim needs a closer look.
        params = claims.claim_params(message_id, worker)
        rows = claim.run(db, claim.statement(), params)
        if not rows:
            return claim.not_claimed(db, message_id, params[claims.CLAIM_NOW])
        pacer, recorder = pacing.Pacer(worker), Recorder()
        try:
            result = attempt.attempt(db, rows[0], worker, recorder, pacer)
            pacer.carry(db, recorder)  # what other runs handed to our slot (handoff.py)
        except BaseException:
            # Leave the claim (and a connection slot the pacer holds): both expire and the
            # row is retried (an unexpected error must not turn into a tight loop). The
            # session rolls back anything uncommitted.
            log.exception("delivery of message %s failed unexpectedly", message_id)
            pacer.abandon()
            raise
        pacer.finish(db)
        return result


def process_batch(message_ids: list[int]) -> dict[int, str]:
    """Handle a batch of wake-ups; returns what happened to each row id."""
    ids = list(dict.fromkeys(message_ids))  # SQS may deliver the same wake-up twice
    if len(ids) == 1:
        return {ids[0]: process(ids[0])}
    return batch.process_batch(ids, claims.worker_id())
