"""Per-key API throttling: a token bucket per server API key, kept in the database so every
Lambda container and local thread draws from the same bucket.

API_RATE_LIMIT_PER_SECOND tokens are added per second up to API_RATE_LIMIT_BURST; each
request takes one, and a request finding less than one is refused with 429 ``RateLimited``
and a Retry-After. A batch is one request (the spec: batch endpoints are for spikes). Off
when the rate is 0, the local default; the deployed stages turn it on.

One atomic upsert per request. On PostgreSQL it runs on its own autocommit connection, so
the bucket row is locked for that statement only, not for the whole request; on SQLite (one
writer at a time anyway) it runs in the request's transaction. The connection acts for the
request's tenant (its key's server: the bucket is its credential's row, db/tenancy.py).
"""
from __future__ import annotations

import math

from sqlalchemy import Boolean, Float, bindparam, text
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db import tenancy
from chalicelib.db.engine import autocommit_engine


def take(db: Session, credential_id: int) -> None:
    """Take a token for the key, or raise RateLimited."""
    settings = get_settings()
    rate = settings.api_rate_limit_per_second
    if rate <= 0:
        return
    burst = max(float(settings.api_rate_limit_burst), 1.0)
    params = {"credential_id": credential_id, "rate": float(rate), "burst": burst,
              "now": clock.timestamp()}
    engine = autocommit_engine()
    if engine is None:
        allowed, tokens = db.execute(_TAKE, params).one()
    else:
        with tenancy.connect(engine, tenancy.current(db)) as connection:
            allowed, tokens = connection.execute(_TAKE, params).one()
    if not allowed:
        wait = max(1, math.ceil((1.0 - tokens) / rate))
        raise errors.RateLimited(
            f"too many requests with this API key: at most {rate:g} a second (bursts of "
            f"{burst:g}); retry in {wait} s, or send many messages in one batch request",
            retry_after=wait)


# Text, the same on PostgreSQL and SQLite (SQLAlchemy compiles its on_conflict_do_update
# construct on every call). In ON CONFLICT ... SET every expression reads the row as it was.
_REFILLED = ("CASE WHEN api_rate_buckets.tokens + :rate * (:now - api_rate_buckets.updated_at)"
             " > :burst THEN :burst ELSE api_rate_buckets.tokens + :rate * "
             "(:now - api_rate_buckets.updated_at) END")
_TAKE = text(
    "INSERT INTO api_rate_buckets (credential_id, tokens, updated_at, allowed) "
    "VALUES (:credential_id, :burst - 1, :now, true) "
    "ON CONFLICT (credential_id) DO UPDATE SET "
    f"tokens = CASE WHEN {_REFILLED} >= 1 THEN {_REFILLED} - 1 ELSE {_REFILLED} END, "
    f"updated_at = :now, allowed = ({_REFILLED} >= 1) "
    "RETURNING allowed, tokens"
).bindparams(bindparam("rate", type_=Float), bindparam("burst", type_=Float),
             bindparam("now", type_=Float)).columns(allowed=Boolean, tokens=Float)
