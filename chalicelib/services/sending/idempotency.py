"""Idempotency keys of send requests (header ``Idempotency-Key``), scoped to the server.

Within ``WINDOW`` (24 h) the same key with the same request (method, path and JSON body,
compared canonically) answers the first answer again -- same status, same ``data``, header
``Idempotent-Replayed: true`` -- and creates nothing; the same key with another request is a
422 ``IdempotencyKeyReused``.

How duplicates never make a second message: ``begin`` inserts the key's row in the
request's OWN transaction before the handler runs, and ``complete`` writes the answer into it
in that same transaction, so the key, the messages and the answer commit together or not at
all.

* PostgreSQL: a concurrent duplicate's INSERT waits on the primary key until the first
  request commits (it then finds the answer and replays it) or rolls back (it then runs
  itself: nothing was created). It waits at most ``WAIT_SECONDS`` (``lock_timeout``, set for
  this transaction inside the same statement), then answers 409 ``IdempotencyInProgress``
  with Retry-After; a crashed first request's transaction is rolled back by the server.
  (The lock_timeout then also bounds the rest of that request's lock waits: any wait of
  10 s there is a fault anyway, and resetting it would cost a round trip.)
* SQLite: transactions begin IMMEDIATE, so duplicates run one after the other anyway.

Only successful answers are kept: a request that fails (validation, a send limit, ...)
writes nothing, its key included, so retrying it with the same key runs it again.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import DateTime, bindparam, delete, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.db.models import IdempotencyKey

HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replayed"
WINDOW = timedelta(hours=24)
WAIT_SECONDS = 10
MAX_LENGTH = 255

_INSERT = {
    # set_config(..., true) lasts for this transaction; the CTE runs before the INSERT's
    # conflict check, so the wait on a duplicate key is bounded by it.
    "postgresql": text(
        "WITH wait AS (SELECT set_config('lock_timeout', :wait, true) AS v) "
        "INSERT INTO idempotency_keys (server_id, key, request_hash, created_at) "
        "SELECT :server_id, :key, :hash, :now FROM wait "
        "ON CONFLICT (server_id, key) DO NOTHING RETURNING 1"),
    "sqlite": text(
        "INSERT INTO idempotency_keys (server_id, key, request_hash, created_at) "
        "VALUES (:server_id, :key, :hash, :now) "
        "ON CONFLICT (server_id, key) DO NOTHING RETURNING 1"),
}
_INSERT = {name: stmt.bindparams(bindparam("now", type_=DateTime()))
           for name, stmt in _INSERT.items()}
_COMPLETE = text("UPDATE idempotency_keys SET response_status = :status, response_body = :body "
                 "WHERE server_id = :server_id AND key = :key")


@dataclass
class Replay:
    status: int
    data_json: str


def check_key(value: str | None) -> str | None:
    """The header's value, or None when absent; a 422 when it is not 1-255 printable ASCII."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_LENGTH or any(not 32 <= ord(c) <= 126 for c in value):
        raise errors.ValidationError(
            f"{HEADER}: must be 1 to {MAX_LENGTH} printable ASCII characters", field=HEADER)
    return value


def request_hash(method: str, path: str, body: bytes | None) -> str:
    """The request's fingerprint: the same JSON with other spacing or key order is the same
    request."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")) \
            if body and body.strip() else ""
    except (ValueError, UnicodeDecodeError):
        canonical = (body or b"").decode("latin-1")
    return hashlib.sha256(f"{method} {path}\n{canonical}".encode()).hexdigest()


def _lock_timed_out(exc: DBAPIError) -> bool:
    detail = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
    state = detail.get("C") if isinstance(detail, dict) else getattr(exc.orig, "pgcode", None)
    return state == "55P03"  # lock_not_available


def begin(db: Session, server_id: int, key: str, fingerprint: str) -> Replay | None:
    """Reserve ``key`` in this transaction (None: go ahead, then call ``complete``), or the
    first answer to replay. Raises IdempotencyKeyReused / IdempotencyInProgress."""
    dialect = db.get_bind().dialect.name
    stmt = _INSERT.get(dialect, _INSERT["sqlite"])
    now = clock.now()
    params = {"server_id": server_id, "key": key, "hash": fingerprint, "now": now}
    if dialect == "postgresql":
        params["wait"] = f"{WAIT_SECONDS}s"
    for _ in range(2):
        try:
            inserted = db.connection().execute(stmt, params).first()
        except DBAPIError as exc:
            if _lock_timed_out(exc):
                raise in_progress() from None
            raise
        if inserted is not None:
            return None
        row = db.execute(select(IdempotencyKey.request_hash, IdempotencyKey.response_status,
                                IdempotencyKey.response_body, IdempotencyKey.created_at)
                         .where(IdempotencyKey.server_id == server_id,
                                IdempotencyKey.key == key)).first()
        if row is None:  # deleted (expired) between the two statements: try again
            continue
        if row.created_at < now - WINDOW:  # an expired key is free again
            db.execute(delete(IdempotencyKey).where(IdempotencyKey.server_id == server_id,
                                                    IdempotencyKey.key == key,
                                                    IdempotencyKey.created_at == row.created_at))
            continue
        if row.request_hash != fingerprint:
            raise errors.IdempotencyKeyReused(
                f"{HEADER} {key!r} was used with a different request within the last 24 "
                "hours; use a new key for a new request", field=HEADER)
        if row.response_status is None:
            raise in_progress()
        return Replay(row.response_status, row.response_body)
    raise in_progress()


def in_progress() -> errors.IdempotencyInProgress:
    exc = errors.IdempotencyInProgress(
        f"a request with this {HEADER} is still being processed; retry shortly to get its "
        "answer", field=HEADER)
    exc.headers = {"Retry-After": "1"}
    return exc


def complete(db: Session, server_id: int, key: str, status: int, data_json: str) -> None:
    """Store the answer with the request's own writes (same transaction)."""
    # Text on the session's connection: the ORM's UPDATE path cost as much as the round trip.
    db.connection().execute(_COMPLETE, {"server_id": server_id, "key": key, "status": status,
                                        "body": data_json})
