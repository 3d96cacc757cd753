"""A batch of webhook wake-ups (an SQS batch of up to 10, or the local queue's) delivered
together around the single-row steps of ``deliver.py``.

On PostgreSQL the batch's rows are claimed with ONE ``SELECT ... FOR UPDATE SKIP LOCKED``
and the attempts' outcomes (rows deleted or rescheduled, log rows) are written together at
the end of that same transaction (``_Writes``): one commit and a few statements for the
batch, where each row alone costs one commit and a statement. The POSTs go out side by side
on the process's pool of WEBHOOKS_CONCURRENCY threads (``concurrency.py``: one lane per
webhook and message, the rest each alone) over keep-alive connections per receiver
(``http.py``); the transaction, holding every claimed row's lock, ends only after the last
lane has finished, so no row is posted twice at once. A
crashed worker's row locks die with its connection and nothing of the batch is recorded, so
every row is due again (a receiver may then see a request twice, with the same
X-Service-UUID, as after any lost answer; webhooks are at least once).

Order: one webhook's events about one message are delivered in id order (the order they
happened), one after another in their lane. When one of them fails, that webhook's later
events for the same message in the batch are not sent before it: they are moved to the
failed one's next attempt time. Events of different messages, or to different webhooks,
may overlap or arrive in any order.

A slow receiver must not hold the lock (and a Lambda) for long: a row not begun within
BATCH_SECONDS of the claim (a lane behind a slow receiver, or waiting for the pool) is left,
the outcomes so far are committed once the running lanes finish and the rest of the batch
is claimed again (SKIP LOCKED: a row another worker took meanwhile is left to it). A
receiver that hangs holds only its own lane (up to WEBHOOKS_TIMEOUT_SECONDS): the others
are posted meanwhile.

Elsewhere (SQLite, where an open transaction holds the database's write lock) each row goes
through ``deliver.process`` (its own claim, ``locked_by``, and outcome), the lanes side by
side all the same.
"""
from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import bindparam, delete, insert, select, update

from chalicelib import clock, queues
from chalicelib.config import get_settings
from chalicelib.db import claims, get_engine, tenancy
from chalicelib.services.webhooks import concurrency
from chalicelib.services.webhooks import deliver as single
from chalicelib.services.webhooks.deliver import HOOK, LOG, REQ


BATCH_SECONDS = 5.0


def process_batch(row_ids: list[int]) -> dict[int, str]:
    ids = list(dict.fromkeys(row_ids))
    settings = get_settings()
    engine = get_engine(settings.database_url)
    if len(ids) == 1:
        return {ids[0]: single.process(ids[0])}
    if engine.dialect.name != "postgresql":
        return _each(engine, ids, settings)
    results: dict[int, str] = {}
    wakeups: list[tuple[int, float]] = []
    reports: list[tuple] = []
    with engine.connect() as conn:
        remaining = ids
        while remaining:
            with conn.begin():
                remaining = _run(conn, remaining, settings, results, wakeups, reports)
    for row_id, delay in wakeups:  # after the commit: the rows are visible
        queues.enqueue(single.QUEUE, row_id, min(delay, queues.SQS_MAX_DELAY))
    for report in reports:
        single.report(*report)
    return results


def _each(engine, ids: list[int], settings) -> dict[int, str]:
    """Not PostgreSQL (SQLite: an open transaction holds the database's write lock, so none
    stays open during the POSTs): the batch's rows are claimed in one short transaction
    (``locked_by``, as ``deliver.process`` claims one), posted in lanes side by side, and
    their outcomes written in a second one, each change guarded by our ``locked_by``
    (``deliver._record``'s rules: a row taken over after a claim expiry is not ours)."""
    worker = claims.worker_id()
    now = clock.now()
    results: dict[int, str] = {}
    expiry = now - timedelta(seconds=settings.claim_timeout_seconds)
    with engine.connect() as conn, conn.begin():
        with tenancy.across_tenants(conn, "webhook-batch-claim"):
            claimed = [row.id for row in conn.execute(_CLAIM_EACH, {
                "ids": ids, "due": now, "expiry": expiry, "worker": worker, "at": now})]
            rows = conn.execute(_CLAIMED_ROWS, {"ids": claimed}).all() if claimed else []
            claimed_ids = set(claimed)
            for row_id in ids:
                if row_id not in claimed_ids:
                    results[row_id] = single.not_claimed(conn, row_id, now, False, settings)
    failed: dict[tuple, bool] = {}  # (webhook, message) of a failed event: one lane's key

    def deliver(lane: list) -> list[tuple]:
        done = []
        for row in lane:
            key = (row.webhook_id, row.message_id)
            if row.message_id is not None and key in failed:
                done.append((row, None, None))  # behind the failed one: moved, not sent
                continue
            job = single.Job(row.webhook_id, row.server_id, row.event, row.uuid, row.body,
                              row.attempts + 1, row.url, row.sign, row.headers_encrypted,
                              row.last_used_at)
            outcome = single.attempt_job(job, settings)
            if not outcome.success:
                failed[key] = True
            done.append((row, job, outcome))
        return done

    attempts = concurrency.run_lanes(rows, _lane_key, deliver, settings)
    wakeups: list[tuple[int, float]] = []
    reports = []
    with engine.connect() as conn, conn.begin():
        tenancy.act(conn, tenancy.for_servers(row.server_id for row in rows))
        retried_at: dict[tuple, object] = {}
        delivered = []  # the successes (nearly all): written together below
        for row, job, outcome in sorted(attempts, key=lambda done: done[0].id):
            key = (row.webhook_id, row.message_id)
            if job is not None and outcome.success:
                delivered.append((row.id, job, outcome))
                results[row.id] = "delivered"
                reports.append((row.id, job, outcome, "delivered"))
                continue
            if job is None:
                next_at = retried_at.get(key)
                if next_at is None:  # the failed one was dropped or is not ours: let go
                    next_at = clock.now()
                conn.execute(_MOVE_OURS, {"row_id": row.id, "worker": worker,
                                          "next_at": next_at})
                wakeups.append((row.id, (next_at - clock.now()).total_seconds()))
                results[row.id] = "after-earlier-event"
                continue
            result, delay = single.record(conn, row.id, worker, job, outcome, settings)
            results[row.id] = result
            if delay is not None:
                wakeups.append((row.id, delay))
                # (at or after the moment record() chose: later events wait at least as long)
                retried_at[key] = clock.now() + timedelta(seconds=delay)
            reports.append((row.id, job, outcome, result))
        _write_delivered(conn, worker, delivered)
    for row_id, delay in wakeups:  # after the commit: the rows are visible
        queues.enqueue(single.QUEUE, row_id, min(max(delay, 0.0), queues.SQS_MAX_DELAY))
    for report in reports:
        single.report(*report)
    return results


# ``_each``'s statements, built once with every value a bind parameter: building one (and
# its cache key) for every batch cost more CPU than running it.
_CLAIM_EACH = (
    update(REQ)
    .where(REQ.c.id.in_(bindparam("ids", expanding=True)),
           REQ.c.next_attempt_at <= bindparam("due", type_=REQ.c.next_attempt_at.type),
           single.free_since(bindparam("expiry", type_=REQ.c.locked_at.type)),
           single.HOOK_ENABLED)
    .values(locked_by=bindparam("worker"), locked_at=bindparam("at"), woken_at=None)
    .returning(REQ.c.id))
_CLAIMED_ROWS = (
    select(REQ.c.id, REQ.c.message_id, *single.JOB_COLUMNS, *single.HOOK_COLUMNS)
    .join(HOOK, HOOK.c.id == REQ.c.webhook_id)
    .where(REQ.c.id.in_(bindparam("ids", expanding=True))).order_by(REQ.c.id))
_MOVE_OURS = (
    update(REQ).where(REQ.c.id == bindparam("row_id"), REQ.c.locked_by == bindparam("worker"))
    .values(next_attempt_at=bindparam("next_at"), locked_by=None, locked_at=None))


def _run(conn, ids: list[int], settings, results: dict, wakeups: list,
         reports: list) -> list[int]:
    """Claim ``ids`` (those due, unclaimed and not locked by another worker), deliver them
    (lanes side by side, ``concurrency.py``) within BATCH_SECONDS; returns the ids left for
    the next transaction. The POSTs run in the pool's threads; every statement runs here,
    on ``conn``, after the last lane has finished."""
    now = clock.now()
    rows = single.claim_batch(conn, ids, now, settings)
    found = {row.id for row in rows}
    for row_id in ids:
        if row_id not in found and row_id not in results:
            results[row_id] = single.not_claimed(conn, row_id, now, True, settings)
    started = time.perf_counter()
    # (webhook, message) -> its next attempt time: a key is one lane's, so never shared.
    failed: dict[tuple, object] = {}
    last_used: dict[int, object] = {}  # webhook -> last_used_at as this batch left it
    writes = _Writes()
    lock = threading.Lock()  # over writes, results, wakeups and last_used
    begun: list[int] = []

    def deliver(lane: list) -> list[int]:
        """One lane's rows in order; returns those left for the next transaction."""
        for index, row in enumerate(lane):
            if begun and time.perf_counter() - started > BATCH_SECONDS:
                return [r.id for r in lane[index:]]
            begun.append(row.id)
            key = (row.webhook_id, row.message_id)
            if row.message_id is not None and key in failed:
                next_at = failed[key]
                with lock:
                    writes.moved.append((row.id, next_at))
                    wakeups.append((row.id, (next_at - now).total_seconds()))
                    results[row.id] = "after-earlier-event"
                continue
            with lock:
                last = last_used.get(row.webhook_id, row.last_used_at)
            job = single.Job(row.webhook_id, row.server_id, row.event, row.uuid, row.body,
                              row.attempts + 1, row.url, row.sign, row.headers_encrypted, last)
            outcome = single.attempt_job(job, settings)
            with lock:
                result, delay = writes.add(row.id, job, outcome, settings)
                results[row.id] = result
                reports.append((row.id, job, outcome, result))
                if outcome.success:
                    last_used[row.webhook_id] = \
                        clock.now() if _stale(job, now) else job.last_used_at
                elif delay is not None:
                    wakeups.append((row.id, delay))
            if not outcome.success and delay is not None:
                failed[key] = clock.now() + timedelta(seconds=delay)
        return []

    left = concurrency.run_lanes(rows, _lane_key, deliver, settings)
    writes.flush(conn)
    return sorted(left)


_DELETE_OURS = delete(REQ).where(REQ.c.id.in_(bindparam("ids", expanding=True)),
                                 REQ.c.locked_by == bindparam("worker"))
_LOG_INSERT_MANY = insert(LOG)
_TOUCH = update(HOOK).where(HOOK.c.id == bindparam("hook_id")).values(
    last_used_at=bindparam("at"))


def _write_delivered(conn, worker: str, delivered: list[tuple]) -> None:
    """``_each``'s successes, as ``deliver._record`` writes one, in three statements for the
    batch instead of three per row (each one built and compiled afresh cost ~1 CPU-ms a
    webhook): the rows deleted while ``locked_by`` is still ours, one log row each (a
    success is logged even when its row was taken over meanwhile, as ``_record`` does), and
    last_used_at of the webhooks whose value is stale."""
    if not delivered:
        return
    now = clock.now()
    conn.execute(_DELETE_OURS, {"ids": [row_id for row_id, _, _ in delivered],
                                "worker": worker})
    conn.execute(_LOG_INSERT_MANY,
                 [single.log_entry(job, outcome, now) for _, job, outcome in delivered])
    touched = {job.webhook_id for _, job, outcome in delivered
               if single.touches_hook(job, outcome, now)}
    for hook_id in sorted(touched):
        conn.execute(_TOUCH, {"hook_id": hook_id, "at": now})


def _lane_key(row):
    return (row.webhook_id, row.message_id) if row.message_id is not None else None


_LOG_INSERT = insert(LOG).returning(LOG.c.id)
_DELETE = delete(REQ).where(REQ.c.id.in_(bindparam("ids", expanding=True)))


class _Writes:
    """The outcomes of a batch's attempts, written together before its commit: one DELETE
    for the delivered and dropped rows, one multi-row INSERT for the log, an UPDATE per retry
    and per webhook whose last_used_at moves, instead of a statement (a round trip) per row.
    We hold every row's lock, so each change is ours to make."""

    def __init__(self) -> None:
        self.deleted: list[int] = []
        self.retried: list[tuple[int, dict]] = []
        self.logs: list[dict] = []
        self.touched: dict[int, object] = {}
        self.moved: list[tuple[int, object]] = []  # rows put behind an earlier failed event

    def add(self, row_id: int, job, outcome, settings) -> tuple[str, float | None]:
        now = clock.now()
        entry = single.log_entry(job, outcome, now)
        result, delay, row_values = single.locked_outcome(job, outcome, entry, now, settings)
        if row_values is None:
            self.deleted.append(row_id)
        else:
            self.retried.append((row_id, row_values))
        self.logs.append(entry)
        if single.touches_hook(job, outcome, now):
            self.touched[job.webhook_id] = now
        return result, delay

    def flush(self, conn) -> None:
        if self.deleted:
            conn.execute(_DELETE, {"ids": self.deleted})
        for row_id, next_at in self.moved:
            conn.execute(update(REQ).where(REQ.c.id == row_id).values(next_attempt_at=next_at))
        for row_id, values in self.retried:
            conn.execute(update(REQ).where(REQ.c.id == row_id).values(**values))
        if self.logs:
            # One statement all the same (SQLAlchemy's "insertmanyvalues" batches an
            # executemany with RETURNING), but compiled once: a multi-row .values() is a new
            # statement to compile for every batch (~1 ms of CPU).
            conn.execute(_LOG_INSERT, self.logs)
        for webhook_id, at in self.touched.items():
            conn.execute(update(HOOK).where(HOOK.c.id == webhook_id).values(last_used_at=at))
        self.__init__()


def _stale(job, now) -> bool:
    """Whether _record just wrote last_used_at (see deliver.LAST_USED_RESOLUTION)."""
    return job.last_used_at is None or now - job.last_used_at > single.LAST_USED_RESOLUTION
