"""Claiming a row before acting on it, so at-least-once wake-ups act at most once.

A claim is one conditional UPDATE (atomic on PostgreSQL and SQLite alike): it succeeds only
if the row is due and nobody holds a live claim. A claim older than CLAIM_TIMEOUT_SECONDS
(longer than the Lambda timeout) is considered abandoned by a dead worker and may be taken.
"""
from __future__ import annotations

import os
import socket
import threading
import uuid
from datetime import datetime, timedelta

from sqlalchemy import and_, bindparam, or_, select, true, update
from sqlalchemy.orm import Session

from chalicelib import clock
from chalicelib.config import get_settings


def worker_id() -> str:
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{threading.get_ident() % 100000}:{uuid.uuid4().hex[:6]}"


def claim_expiry() -> datetime:
    return clock.now() - timedelta(seconds=get_settings().claim_timeout_seconds)


def unclaimed(model):
    return or_(model.locked_at.is_(None), model.locked_at < claim_expiry())


def claim(db: Session, model, row_id: int, worker: str, *conditions) -> bool:
    """Take the claim on row ``row_id`` if it is due and unclaimed; commits at once."""
    now = clock.now()
    result = db.execute(
        update(model)
        .where(model.id == row_id, model.next_attempt_at <= now, unclaimed(model), *conditions)
        .values(locked_by=worker, locked_at=now, **_woken_cleared(model))
        .execution_options(synchronize_session=False)
    )
    db.commit()
    return result.rowcount == 1


def claim_statement(model, columns, *conditions, many: bool = False):
    """A claim as a core ``UPDATE ... RETURNING <columns>`` (which may include scalar
    subqueries reading what the caller needs next, so the claim and its reads are ONE round
    trip) with bind parameters instead of values: build it once and run it with
    ``claim_params`` (a reused statement skips SQLAlchemy's construction, cache key and
    compilation). ``columns``/``conditions`` may use ``bindparam(CLAIM_NOW)``. ``many``: the
    rows named by a list (``claim_many_params``), claimed together in that one statement."""
    table = model.__table__
    now = bindparam(CLAIM_NOW, type_=table.c.locked_at.type)
    which = table.c.id.in_(bindparam("claim_ids", expanding=True)) if many else \
        table.c.id == bindparam("claim_id", type_=table.c.id.type)
    return (update(table)
            .where(which,
                   table.c.next_attempt_at <= now,
                   or_(table.c.locked_at.is_(None),
                       table.c.locked_at < bindparam("claim_expired",
                                                     type_=table.c.locked_at.type)),
                   *conditions)
            .values(locked_by=bindparam("claim_worker", type_=table.c.locked_by.type),
                    locked_at=now, **_woken_cleared(model))
            .returning(*columns))


CLAIM_NOW = "claim_now"


def claim_params(row_id: int, worker: str) -> dict:
    now = clock.now()
    return {"claim_id": row_id, "claim_worker": worker, CLAIM_NOW: now,
            "claim_expired": now - timedelta(seconds=get_settings().claim_timeout_seconds)}


def claim_many_params(row_ids: list[int], worker: str) -> dict:
    params = claim_params(0, worker)
    del params["claim_id"]
    return {**params, "claim_ids": list(row_ids)}


def release(row, worker: str) -> bool:
    """Drop our claim on a loaded row (in the caller's transaction). False when the claim is
    no longer ours (it expired and another worker took it)."""
    if row.locked_by != worker:
        return False
    row.locked_by = None
    row.locked_at = None
    return True


def _woken_cleared(model) -> dict:
    """A claim consumes the sweeper's wake-up: the row may be woken again at once if due."""
    return {"woken_at": None} if hasattr(model, "woken_at") else {}


def due_ids(db: Session, model, limit: int, grace_seconds: float, *conditions,
            sweeping: bool = True) -> list[int]:
    """Ids of rows due for at least ``grace_seconds`` and unclaimed (for the sweeper), marked
    as woken now. A row the sweeper already woke is left out until SWEEP_REWAKE_SECONDS pass
    without a claim (its wake-up was lost): during a backlog the queue holds one sweeper
    wake-up per row, not one more per sweep. ``sweeping=False``: every due, unclaimed row,
    woken or not, oldest first, and nothing marked (a read, for the queue-lag metric)."""
    now = clock.now()
    cutoff = now - timedelta(seconds=grace_seconds)
    rewake = now - timedelta(seconds=get_settings().sweep_rewake_seconds)
    marks = sweeping and hasattr(model, "woken_at")  # bulk jobs carry no wake-up mark
    stmt = (select(model.id)
            .where(and_(model.next_attempt_at.is_not(None), model.next_attempt_at <= cutoff),
                   unclaimed(model),
                   or_(model.woken_at.is_(None), model.woken_at < rewake) if marks else true(),
                   *conditions)
            .order_by(model.next_attempt_at).limit(limit))
    ids = list(db.scalars(stmt))
    if not ids or not marks:
        return ids
    # Marked only while still unclaimed: a worker may have claimed one since the SELECT (its
    # claim cleared the mark, which must stay cleared, and it needs no wake-up).
    marked = set(db.scalars(update(model).where(model.id.in_(ids), unclaimed(model))
                            .values(woken_at=now).returning(model.id)
                            .execution_options(synchronize_session=False)))
    return [row_id for row_id in ids if row_id in marked]


def forget_wakeups(db: Session, *models) -> None:
    """No wake-up is queued any more (the in-process queue starts empty): every due row may be
    woken at once."""
    for model in models:
        db.execute(update(model).where(model.woken_at.is_not(None)).values(woken_at=None)
                   .execution_options(synchronize_session=False))
