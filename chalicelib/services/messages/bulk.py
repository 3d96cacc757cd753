"""Bulk actions on a server's outgoing messages: ``release`` (Held -> delivered), ``retry``
(HardFail -> delivered again), ``cancel`` (Scheduled/Pending, never attempted -> Cancelled).

``POST /messages/bulk`` with ``dry_run`` answers how many messages match; otherwise it
writes a BulkJob and answers 202 at once. The job covers the messages that exist when it is
created (ids up to ``max_message_id``: mail sent later is never swept in) and is carried out
by ``process`` (the bulk queue's worker) in chunks of BULK_CHUNK_SIZE, in id order. Each chunk's
changes commit together with the job's ``cursor`` and counts, so a worker that dies resumes
after the last committed chunk, and every change is a conditional UPDATE on the message's
status (``actions.py``), so nothing is acted on twice. No request runs into an
API Gateway or Lambda timeout however many rows match.

Counts: ``matched`` when the job was created; ``done`` the messages changed; ``failed`` the
matched ones it could not change (their status changed meanwhile, a worker held them, or --
for release -- the recipient is still suppressed, so the message stays held).
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors, queues
from chalicelib.config import get_settings
from chalicelib.db import after_commit, claims, session_scope, tenancy
from chalicelib.queues import SQS_MAX_DELAY
from chalicelib.db.models import BulkJob, Message, Server, Stream
from chalicelib.services.messages import actions as message_actions
from chalicelib.services.suppressions import entries

log = logging.getLogger(__name__)

ACTIONS = tuple(message_actions.ACTION_STATUSES)
QUEUE = queues.BULK
QUEUED, RUNNING, DONE = "Queued", "Running", "Done"
MAX_IDS = 10000


def _naive_utc(value: datetime | None, name: str) -> datetime | None:
    if value is None or value.tzinfo is None:
        return value
    try:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    except (OverflowError, ValueError):
        raise errors.ValidationError(f"filter.{name}: out of range",
                                     field=f"filter.{name}") from None


def normalize_filter(db: Session, server: Server, action: str, given: dict) -> dict:
    """The filter as stored on the job (JSON): unknown stream or a status the action does not
    apply to is a 422 naming the field."""
    statuses = message_actions.ACTION_STATUSES[action]
    result: dict[str, Any] = {}
    status = given.get("status")
    if status is not None:
        if status not in statuses:
            raise errors.ValidationError(
                f"filter.status: {action} applies to {' or '.join(statuses)} messages, not "
                f"{status}", field="filter.status")
        result["status"] = status
    for name in ("tag", "rcpt_to"):
        if given.get(name) is not None:
            result[name] = given[name]
    if given.get("stream") is not None:
        stream_id = db.scalar(select(Stream.id).where(Stream.server_id == server.id,
                                                      Stream.permalink == given["stream"]))
        if stream_id is None:
            raise errors.ValidationError(f"filter.stream: no stream {given['stream']!r} on "
                                         "this server", field="filter.stream")
        result["stream"], result["stream_id"] = given["stream"], stream_id
    for name in ("before", "after"):
        moment = _naive_utc(given.get(name), name)
        if moment is not None:
            result[name] = moment.isoformat()
    if given.get("ids") is not None:
        result["ids"] = sorted(set(given["ids"]))
    return result


def conditions(server_id: int, action: str, spec: dict) -> list:
    """The WHERE clauses of a job's messages (without its id range)."""
    where = [Message.server_id == server_id, Message.scope == "outgoing",
             Message.status.in_([spec["status"]] if "status" in spec
                                else message_actions.ACTION_STATUSES[action])]
    if "tag" in spec:
        where.append(Message.tag == spec["tag"])
    if "stream_id" in spec:
        where.append(Message.stream_id == spec["stream_id"])
    if "rcpt_to" in spec:
        where.append(func.lower(Message.rcpt_to) == spec["rcpt_to"].strip().lower())
    if "before" in spec:
        where.append(Message.created_at < datetime.fromisoformat(spec["before"]))
    if "after" in spec:
        where.append(Message.created_at >= datetime.fromisoformat(spec["after"]))
    if "ids" in spec:
        where.append(Message.id.in_(spec["ids"]))
    return where


def _check_action(server: Server, action: str) -> None:
    if action in ("release", "retry") and server.mode == "Development":
        raise errors.ValidationError(f"{action}: {message_actions.DEVELOPMENT}", field="action")


def count(db: Session, server: Server, action: str, spec: dict,
          max_id: int | None = None) -> int:
    where = conditions(server.id, action, spec)
    if max_id is not None:
        where.append(Message.id <= max_id)
    return db.scalar(select(func.count()).select_from(Message).where(*where)) or 0


def create(db: Session, server: Server, action: str, given: dict, *,
           dry_run: bool = False) -> dict:
    """A dry run's count, or a new job (woken after the commit)."""
    spec = normalize_filter(db, server, action, given)
    if dry_run:
        return {"dry_run": True, "action": action, "matched": count(db, server, action, spec)}
    _check_action(server, action)
    max_id = db.scalar(select(func.max(Message.id)).where(Message.server_id == server.id)) or 0
    now = clock.now()
    job = BulkJob(server_id=server.id, action=action, filter=spec, status=QUEUED,
                  matched=count(db, server, action, spec, max_id), done=0, failed=0,
                  max_message_id=max_id, cursor=0, next_attempt_at=now, created_at=now,
                  updated_at=now)
    db.add(job)
    db.flush()
    job_id = job.id
    after_commit(db, lambda: queues.enqueue(QUEUE, job_id))
    return {"job": record(job)}


def find(db: Session, server: Server, job_id: int) -> BulkJob:
    job = db.get(BulkJob, job_id)
    if job is None or job.server_id != server.id:
        raise errors.NotFound(f"no bulk job {job_id} on this server")
    return job


def record(job: BulkJob) -> dict:
    spec = {k: v for k, v in (job.filter or {}).items() if k != "stream_id"}
    return {"id": job.id, "action": job.action, "status": job.status, "matched": job.matched,
            "done": job.done, "failed": job.failed, "filter": spec, "details": job.details,
            "created_at": job.created_at, "updated_at": job.updated_at,
            "finished_at": job.finished_at}


# --- one chunk (the worker) ----------------------------------------------------------------

def apply(db: Session, job: BulkJob, ids: list[int]) -> int:
    """Carry the job's action out on ``ids`` (in the caller's transaction); returns how many
    changed."""
    server_id = job.server_id
    if job.action == "cancel":
        return len(message_actions.cancel_ids(db, server_id, ids,
                                              f"cancelled by bulk job {job.id}"))
    statuses = message_actions.ACTION_STATUSES[job.action]
    if job.action == "release":
        # A recipient still suppressed stays held (and counts as failed).
        rows = {row.id: row for row in db.execute(
            select(Message.id, Message.rcpt_to, Message.stream_id).where(Message.id.in_(ids)))}
        blocked = entries.suppressed_among(db, server_id, [r.rcpt_to for r in rows.values()])
        if blocked:  # an entry for every stream, or for the message's own stream
            ids = [i for i in ids
                   if not entries.held(blocked, rows[i].rcpt_to, rows[i].stream_id)]
    return len(message_actions.requeue(db, server_id, ids, statuses,
                                       f"{job.action}d by bulk job {job.id}"))


def next_chunk(db: Session, job: BulkJob, size: int) -> list[int]:
    return list(db.scalars(
        select(Message.id)
        .where(*conditions(job.server_id, job.action, job.filter or {}),
               Message.id > job.cursor, Message.id <= job.max_message_id)
        .order_by(Message.id).limit(size)))


def advance(db: Session, job_id: int, worker: str, cursor: int, done: int, failed: int) -> bool:
    """Move the job's cursor and counts with the chunk's changes, only while ``worker`` still
    holds the claim (renewing it); False: the claim was lost, roll the chunk back."""
    now = clock.now()
    result = db.execute(
        update(BulkJob).where(BulkJob.id == job_id, BulkJob.locked_by == worker)
        .values(cursor=cursor, done=BulkJob.done + done, failed=BulkJob.failed + failed,
                status=RUNNING, locked_at=now, updated_at=now)
        .execution_options(synchronize_session=False))
    return result.rowcount == 1


def finish(db: Session, job_id: int, worker: str) -> bool:
    """Done: what matched at the start and was never changed counts as failed."""
    now = clock.now()
    result = db.execute(
        update(BulkJob).where(BulkJob.id == job_id, BulkJob.locked_by == worker)
        .values(status=DONE, finished_at=now, updated_at=now, next_attempt_at=None,
                locked_by=None, locked_at=None,
                failed=func.max(BulkJob.failed, BulkJob.matched - BulkJob.done)
                if db.get_bind().dialect.name == "sqlite"
                else func.greatest(BulkJob.failed, BulkJob.matched - BulkJob.done))
        .execution_options(synchronize_session=False))
    return result.rowcount == 1


# --- the bulk queue's worker ----------------------------------------------------------------

ACTIVE = (QUEUED, RUNNING)


def process(job_id: int) -> str:
    """One wake-up of the bulk queue: chunks of the job for up to BULK_TIME_BUDGET_SECONDS,
    then it re-enqueues the job (well inside the Lambda timeout). The job row is claimed
    first, like every worker's (a duplicate wake-up does nothing); per chunk, in ONE
    transaction: the next BULK_CHUNK_SIZE matching message ids after the cursor, the action
    on them, the cursor and counts moved (and the claim renewed) only while the claim is
    still ours, else the chunk rolls back. A worker that dies leaves the claim to expire
    (CLAIM_TIMEOUT_SECONDS); the sweeper then wakes the job and the next worker resumes after
    the last committed chunk."""
    worker = claims.worker_id()
    settings = get_settings()
    deadline = time.monotonic() + settings.bulk_time_budget_seconds
    with session_scope() as db:
        # The wake-up names a job, not a tenant ("bulk-claim", db/tenancy.py); once it is
        # claimed the worker acts for the job's server.
        with tenancy.across_tenants(db, "bulk-claim"):
            claimed = claims.claim(db, BulkJob, job_id, worker, BulkJob.status.in_(ACTIVE))
            job = db.get(BulkJob, job_id)
        if job is not None:
            tenancy.act(db, tenancy.for_server(job.server_id))
        if not claimed:
            if job is None or job.status not in ACTIVE or job.next_attempt_at is None:
                return "nothing-to-do"
            wait = (job.next_attempt_at - clock.now()).total_seconds()
            if wait > 0:
                queues.enqueue_after_commit(db, queues.BULK, job_id, min(wait, SQS_MAX_DELAY))
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
                    queues.enqueue_after_commit(db, queues.BULK, job_id)
                db.commit()
                return "paused"


def _chunk(db, job_id: int, worker: str, size: int) -> str:
    """One chunk in one transaction; "more", "done" or "lost-claim"."""
    job = db.get(BulkJob, job_id)
    db.refresh(job)
    ids = next_chunk(db, job, size)
    if not ids:
        finished = finish(db, job_id, worker)
        db.commit()
        return "done" if finished else "lost-claim"
    changed = apply(db, job, ids)
    if not advance(db, job_id, worker, ids[-1], changed, len(ids) - changed):
        db.rollback()
        db.info.pop("after_commit", None)  # nothing of the chunk happened
        log.warning("bulk job %s: claim lost; another worker carries on", job_id)
        return "lost-claim"
    db.commit()
    # The chunk's delivery wake-ups now, not when the whole wake-up ends.
    for callback in db.info.pop("after_commit", []):
        callback()
    return "more"


def find_due(db, limit: int, grace: float, sweeping: bool = True) -> list[int]:
    return claims.due_ids(db, BulkJob, limit, grace, BulkJob.status.in_(ACTIVE),
                          sweeping=sweeping)
