"""Delivering webhook requests: one attempt (URL check, signed pinned POST) and the queue
row's life around it (claim, outcome, log, backoff).

The HTTP attempt runs outside any database transaction: the claim is committed first, so a
slow receiver never holds a connection or a lock, and a second wake-up for the same row finds
the claim and does nothing. The outcome is then written in one short transaction: the row is
deleted (2xx, or the 10th failure) or rescheduled, and one log row records the attempt.

A wake-up names a row, not a tenant: the claims here (one row, or a batch's for batch.py) and
the closer look when one fails find rows across tenants (db/tenancy.py, "webhook-claim"); the
connection then acts for the claimed rows' servers.
"""
from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import bindparam, delete, exists, insert, or_, select, update

from chalicelib import clock, observability, queues
from chalicelib.config import Settings, get_settings
from chalicelib.db import claims, get_engine, tenancy
from chalicelib.db.models import Webhook, WebhookRequest, WebhookRequestLog
from chalicelib.services.security import installation_keys, keys, url_safety
from chalicelib.services.webhooks import http

log = logging.getLogger(__name__)

QUEUE = queues.WEBHOOKS
MAX_ATTEMPTS = 10
BODY_EXCERPT_BYTES = 2048
MAX_DRAIN_BYTES = 1024 * 1024
MAX_RETRY_DELAY = 24 * 3600
USER_AGENT = "email-service-webhooks/1"


@dataclass
class Outcome:
    status_code: int | None
    success: bool
    response_body: str | None
    error: str | None
    duration_ms: int


def retry_delay_seconds(failed_attempts: int, settings: Settings | None = None) -> float:
    """Delay after the ``failed_attempts``-th failure: 1, 2, 4 ... minutes (capped at 24 h),
    times TIME_SCALE."""
    minutes = 2 ** max(0, failed_attempts - 1)
    return (settings or get_settings()).scaled(min(60 * minutes, MAX_RETRY_DELAY))


def build_headers(event: str, uuid: str, body: bytes, sign: bool,
                  custom: dict[str, str] | None, settings: Settings | None = None
                  ) -> dict[str, str]:
    # Custom headers first: the service's own headers can never be overridden by them.
    headers = dict(custom or {})
    headers.update({"Content-Type": "application/json", "User-Agent": USER_AGENT,
                    "X-Service-Event": event, "X-Service-UUID": uuid})
    if sign:
        # The current installation key (services/security/installation_keys.py: rotatable; during an
        # overlap the receiver can tell which public key to verify with).
        key_id, headers["X-Service-Signature"] = installation_keys.sign(body)
        headers["X-Service-Signature-Key"] = key_id
    return headers


def attempt(url: str, body: bytes, headers: dict[str, str],
            settings: Settings | None = None) -> Outcome:
    """POST ``body`` once. The URL is checked (and resolved) now, not only at registration:
    DNS can change; the POST connects only to the addresses checked (``http.py``). Redirects
    are not followed; any 2xx is a success."""
    settings = settings or get_settings()  # (one read per delivery: it is not free)
    started = time.perf_counter()

    def elapsed() -> int:
        return int((time.perf_counter() - started) * 1000)

    try:
        ips = url_safety.check_url(url, allow_private=settings.webhooks_allow_private_targets)
    except url_safety.UnsafeURL as exc:
        return Outcome(None, False, None, f"refused: {exc}", elapsed())
    try:
        response = http.post(url, ips, body, headers, settings.webhooks_timeout_seconds)
    except http.Failed as exc:
        if exc.timeout:
            return Outcome(None, False, None,
                           f"timed out after {settings.webhooks_timeout_seconds:g} s", elapsed())
        # Exception texts name the address, never request headers: no secret can leak here.
        return Outcome(None, False, None, f"connection failed: {exc}"[:1000], elapsed())
    excerpt = http.read_bounded(response, BODY_EXCERPT_BYTES, MAX_DRAIN_BYTES,
                                started + settings.webhooks_timeout_seconds)
    status = response.status
    success = 200 <= status < 300
    error = None
    if not success:
        error = f"HTTP {status}"
        if 300 <= status < 400:
            error += " (redirects are not followed)"
    return Outcome(status, success, excerpt.decode("utf-8", "replace"), error, elapsed())


@dataclass
class Job:
    """What a claimed row needs for its attempt, read inside the claim transaction."""

    webhook_id: int
    server_id: int
    event: str
    uuid: str
    body: str
    attempt: int
    url: str
    sign: bool
    headers_encrypted: str | None
    last_used_at: object


REQ = WebhookRequest.__table__
HOOK = Webhook.__table__
LOG = WebhookRequestLog.__table__
# Only a row of an enabled webhook is claimed: disabling drops pending rows, and this closes
# the race with a fan-out that committed a row just after.
HOOK_ENABLED = exists().where(HOOK.c.id == REQ.c.webhook_id, HOOK.c.enabled.is_(True))
LAST_USED_RESOLUTION = timedelta(minutes=1)


def process(row_id: int) -> str:
    """Handle one wake-up for queue row ``row_id``; returns what happened (for logs/tests).

    Plain SQL on one connection (one pool checkout). On PostgreSQL the row is claimed with
    SELECT ... FOR UPDATE SKIP LOCKED and the whole attempt is one transaction: a crashed
    worker's lock dies with its connection, and only one commit is paid. Elsewhere (SQLite,
    where an open transaction would hold the database's write lock during the POST) the claim
    is a committed conditional UPDATE (``claims``) and the outcome a second transaction.
    """
    worker = claims.worker_id()
    settings = get_settings()
    engine = get_engine(settings.database_url)
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn, conn.begin():  # rolled back on any error
            job = _claim(conn, row_id, worker, True, settings)
            if isinstance(job, str):
                return job
            outcome = attempt_job(job, settings)
            result, delay = _record(conn, row_id, worker, job, outcome, True, settings)
    else:
        # The connection goes back to the pool during the POST: with many POSTs in flight
        # (concurrency.py) none waits for a connection that another holds while it waits.
        with engine.connect() as conn, conn.begin():
            job = _claim(conn, row_id, worker, False, settings)
        if isinstance(job, str):
            return job
        outcome = attempt_job(job, settings)
        with engine.connect() as conn, conn.begin():
            tenancy.act(conn, tenancy.for_server(job.server_id))
            result, delay = _record(conn, row_id, worker, job, outcome, False, settings)
    if delay is not None:
        queues.enqueue(QUEUE, row_id, min(delay, queues.SQS_MAX_DELAY))
    report(row_id, job, outcome, result)
    return result


def report(row_id: int, job: Job, outcome: Outcome, result: str) -> None:
    """An attempt's counter and log line."""
    observability.count("webhook_succeeded" if outcome.success else "webhook_failed")
    observability.log("webhook.attempt", "info" if outcome.success else "warning",
                      webhook_request_id=row_id, webhook_id=job.webhook_id, event_name=job.event,
                      uuid=job.uuid, attempt=job.attempt, url=observability.safe_url(job.url),
                      status_code=outcome.status_code, success=outcome.success,
                      error=outcome.error, duration_ms=outcome.duration_ms, result=result)


def attempt_job(job: Job, settings: Settings) -> Outcome:
    body = job.body.encode("utf-8")
    headers = build_headers(job.event, job.uuid, body, job.sign,
                            _decrypt_headers(job.headers_encrypted), settings)
    return attempt(job.url, body, headers, settings)


JOB_COLUMNS = (REQ.c.webhook_id, REQ.c.server_id, REQ.c.event, REQ.c.uuid, REQ.c.body,
                REQ.c.attempts)
HOOK_COLUMNS = (HOOK.c.url, HOOK.c.sign, HOOK.c.headers_encrypted, HOOK.c.last_used_at)


def record(conn, row_id: int, worker: str, job: Job, outcome: Outcome, settings: Settings):
    """batch.py's outcome of a row claimed with ``locked_by`` (not PostgreSQL's row lock):
    ``_record``'s rules."""
    return _record(conn, row_id, worker, job, outcome, False, settings)


def unclaimed_at(now, settings: Settings):
    """claims.unclaimed, with the settings already read (the claim is free at ``now``)."""
    return free_since(now - timedelta(seconds=settings.claim_timeout_seconds))


def free_since(expiry):
    """A row nobody holds: never claimed, or its claim taken before ``expiry`` (a value or
    a bind parameter)."""
    return or_(REQ.c.locked_at.is_(None), REQ.c.locked_at < expiry)


def _claim(conn, row_id: int, worker: str, row_locks: bool, settings: Settings) -> Job | str:
    with tenancy.across_tenants(conn, "webhook-claim"):
        job = _find(conn, row_id, worker, row_locks, settings)
    if isinstance(job, Job):
        tenancy.act(conn, tenancy.for_server(job.server_id))
    return job


def claim_batch(conn, ids: list[int], now, settings: Settings) -> list:
    """batch.py's claim: the rows of ``ids`` due, unclaimed and not locked by another worker,
    locked (FOR UPDATE SKIP LOCKED), in id order; the connection then acts for their servers."""
    expiry = now - timedelta(seconds=settings.claim_timeout_seconds)
    with tenancy.across_tenants(conn, "webhook-claim"):
        rows = conn.execute(_claim_batch_statement(),
                            {"ids": list(ids), "now": now, "expiry": expiry}).all()
    tenancy.act(conn, tenancy.for_servers(row.server_id for row in rows))
    return rows


@functools.lru_cache(maxsize=1)
def _claim_batch_statement():
    """Built once, every value a bind parameter: constructing it (and its cache key) for
    every batch cost more CPU than running it."""
    now = bindparam("now", type_=REQ.c.next_attempt_at.type)
    expiry = bindparam("expiry", type_=REQ.c.locked_at.type)
    return (select(REQ.c.id, REQ.c.message_id, *JOB_COLUMNS, *HOOK_COLUMNS)
            .join(HOOK, HOOK.c.id == REQ.c.webhook_id)
            .where(REQ.c.id.in_(bindparam("ids", expanding=True)), REQ.c.next_attempt_at <= now,
                   (REQ.c.locked_at.is_(None)) | (REQ.c.locked_at < expiry),
                   HOOK.c.enabled.is_(True))
            .order_by(REQ.c.id).with_for_update(of=REQ, skip_locked=True))


def _find(conn, row_id: int, worker: str, row_locks: bool, settings: Settings) -> Job | str:
    now = clock.now()
    due = (REQ.c.id == row_id, REQ.c.next_attempt_at <= now, unclaimed_at(now, settings))
    if row_locks:
        found = conn.execute(
            select(*JOB_COLUMNS, *HOOK_COLUMNS).join(HOOK, HOOK.c.id == REQ.c.webhook_id)
            .where(*due, HOOK.c.enabled.is_(True))
            .with_for_update(of=REQ, skip_locked=True)).first()
    else:
        claimed = conn.execute(update(REQ).where(*due, HOOK_ENABLED)
                               .values(locked_by=worker, locked_at=now, woken_at=None)
                               .returning(*JOB_COLUMNS)).first()
        found = claimed and conn.execute(
            select(*JOB_COLUMNS, *HOOK_COLUMNS).join(HOOK, HOOK.c.id == REQ.c.webhook_id)
            .where(REQ.c.id == row_id)).first()
    if not found:
        return _why_not_claimed(conn, row_id, now, row_locks, settings)
    return Job(found.webhook_id, found.server_id, found.event, found.uuid, found.body,
                found.attempts + 1, found.url, found.sign, found.headers_encrypted,
                found.last_used_at)


def not_claimed(conn, row_id: int, now, row_locks: bool, settings: Settings) -> str:
    """Why the claim failed: the row is gone (a duplicate wake-up), not due yet (woken early:
    sleep again for the rest, do nothing else), held by another worker, or its webhook is
    disabled (a disabled webhook gets nothing: drop the row)."""
    with tenancy.across_tenants(conn, "webhook-claim"):
        return _why_not_claimed(conn, row_id, now, row_locks, settings)


def _why_not_claimed(conn, row_id: int, now, row_locks: bool, settings: Settings) -> str:
    row = conn.execute(select(REQ.c.next_attempt_at, REQ.c.webhook_id)
                       .where(REQ.c.id == row_id)).first()
    if row is None:
        return "gone"
    if row.next_attempt_at > now:
        remaining = (row.next_attempt_at - now).total_seconds()
        queues.enqueue(QUEUE, row_id, min(remaining, queues.SQS_MAX_DELAY))  # nothing to commit
        return "early"
    enabled = conn.execute(select(HOOK.c.enabled).where(HOOK.c.id == row.webhook_id)).scalar()
    if not enabled:
        # Never wait for a row another worker holds: it will come back here when released.
        free = select(REQ.c.id).where(REQ.c.id == row_id, unclaimed_at(now, settings))
        if row_locks:
            free = free.with_for_update(skip_locked=True)
        if conn.execute(free).first():
            conn.execute(delete(REQ).where(REQ.c.id == row_id))
        return "disabled"
    return "busy"


_HEADERS_KEPT = 256  # webhooks whose decrypted custom headers a process keeps
_headers: dict[tuple, dict[str, str]] = {}


def _decrypt_headers(token: str | None) -> dict[str, str]:
    """A webhook's custom headers (never modify the dict returned: it is shared). The
    plaintext of a token under a given box never changes, so it is decrypted once per
    process and box (~15 us of CPU a POST, measured), not for every POST; a webhook whose
    headers change gets a new token. A box no longer configured is never asked again."""
    if not token:
        return {}
    box = keys.secret_box()
    cache_key = (box, token)  # (a box hashes by identity)
    found = _headers.get(cache_key)
    if found is None:
        found = json.loads(box.decrypt_text(token))
        if len(_headers) >= _HEADERS_KEPT:
            _headers.clear()  # (rarely: as many webhooks as that posting from one process)
        _headers[cache_key] = found
    return found


def log_entry(job: Job, outcome: Outcome, now) -> dict:
    """The attempt's row in the webhook log (will_retry set by the outcome's handling)."""
    return {"server_id": job.server_id, "webhook_id": job.webhook_id, "event": job.event,
            "uuid": job.uuid, "url": job.url, "attempt": job.attempt,
            "status_code": outcome.status_code, "success": outcome.success,
            "response_body": outcome.response_body, "error": outcome.error,
            "duration_ms": outcome.duration_ms, "will_retry": False, "next_attempt_at": None,
            "created_at": now, "payload": json.loads(job.body)}


def _record(conn, row_id: int, worker: str, job: Job, outcome: Outcome, row_locks: bool,
            settings: Settings):
    """Delete or reschedule the row (only while the claim is still ours) and log the attempt.
    Returns (result, delay of the next wake-up or None)."""
    now = clock.now()
    entry = log_entry(job, outcome, now)
    if row_locks:
        return _record_locked(conn, row_id, job, outcome, entry, now, settings)
    ours = (REQ.c.id == row_id, REQ.c.locked_by == worker)
    result, delay = "orphaned", None
    if outcome.success or job.attempt >= MAX_ATTEMPTS:
        deleted = conn.execute(delete(REQ).where(*ours)).rowcount
        if outcome.success:
            result = "delivered"
            if job.last_used_at is None or now - job.last_used_at > LAST_USED_RESOLUTION:
                conn.execute(update(HOOK).where(HOOK.c.id == job.webhook_id)
                             .values(last_used_at=now))
        elif deleted:
            result = "dropped"  # the 10th failure: the log keeps the story
    else:
        delay = retry_delay_seconds(job.attempt, settings)
        next_at = now + timedelta(seconds=delay)
        updated = conn.execute(update(REQ).where(*ours).values(
            attempts=job.attempt, next_attempt_at=next_at, locked_by=None,
            locked_at=None, woken_at=None)).rowcount
        if updated:
            result = "retry"
            entry.update(will_retry=True, next_attempt_at=next_at)
        else:
            delay = None
    # "orphaned": the row was dropped meanwhile (webhook disabled or deleted) or, after a
    # claim expiry, taken by another worker; the attempt is still logged while the webhook is.
    if result != "orphaned" or conn.execute(
            select(HOOK.c.id).where(HOOK.c.id == job.webhook_id)).first():
        conn.execute(insert(LOG).values(**entry))
    return result, delay


def _record_locked(conn, row_id: int, job: Job, outcome: Outcome, entry: dict, now,
                   settings: Settings):
    """PostgreSQL: we hold the row lock, so the row is ours; the row change and the log row
    go in one statement (a data-modifying CTE)."""
    result, delay, row_values = locked_outcome(job, outcome, entry, now, settings)
    change = delete(REQ).where(REQ.c.id == row_id) if row_values is None else \
        update(REQ).where(REQ.c.id == row_id).values(**row_values)
    conn.execute(insert(LOG).values(**entry).add_cte(change.cte("change")))
    if touches_hook(job, outcome, now):
        conn.execute(update(HOOK).where(HOOK.c.id == job.webhook_id).values(last_used_at=now))
    return result, delay


def locked_outcome(job: Job, outcome: Outcome, entry: dict, now, settings: Settings):
    """What an attempt on a row we hold makes of it: (result, delay of the next wake-up or
    None, the row's new values, or None when it is to be deleted); completes ``entry``."""
    if outcome.success or job.attempt >= MAX_ATTEMPTS:
        return ("delivered" if outcome.success else "dropped"), None, None
    delay = retry_delay_seconds(job.attempt, settings)
    next_at = now + timedelta(seconds=delay)
    entry.update(will_retry=True, next_attempt_at=next_at)
    # The sweeper's wake-up, if any, is consumed.
    return "retry", delay, {"attempts": job.attempt, "next_attempt_at": next_at,
                            "locked_by": None, "locked_at": None, "woken_at": None}


def touches_hook(job: Job, outcome: Outcome, now) -> bool:
    """Whether a success updates the webhook's last_used_at (LAST_USED_RESOLUTION)."""
    return outcome.success and (job.last_used_at is None
                                or now - job.last_used_at > LAST_USED_RESOLUTION)


def find_due(db, limit: int, grace_seconds: float, sweeping: bool = True) -> list[int]:
    """Due requests whose wake-up may have been lost (for the sweeper; ``sweeping=False``:
    claims.due_ids' read for the queue-lag metric)."""
    return claims.due_ids(db, WebhookRequest, limit, grace_seconds, sweeping=sweeping)
