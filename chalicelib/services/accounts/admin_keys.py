"""Admin API keys: full management access; the secret is shown once; revoked keys are kept.

The keys are the instance's, no tenant's (db/tenancy.NOT_TENANT_DATA); a request with one acts
for every tenant (api/auth.py)."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import clock, errors, observability
from chalicelib.db import tenancy
from chalicelib.db.models import AdminApiKey
from chalicelib.services.security.tokens import generate_secret, hash_secret, hint


def create_key(db: Session, name: str, created_by_user_id: int | None = None) -> tuple[AdminApiKey, str]:
    secret = generate_secret("ak_", 32)
    key = AdminApiKey(name=name, key_hash=hash_secret(secret), key_hint=hint(secret),
                      created_by_user_id=created_by_user_id)
    db.add(key)
    db.flush()
    return key, secret


def seed_key(db: Session, secret: str) -> tuple[AdminApiKey, list[AdminApiKey]]:
    """Make the operator's ADMIN_API_KEY usable (idempotent; un-revokes it if it was revoked)
    and revoke every key seeded from an earlier, different ADMIN_API_KEY: changing the
    variable is how an operator rotates a leaked key, so the old one must stop working.
    Returns the seeded key and the ones it revoked (recorded in the audit trail, which is
    the instance's: across tenants)."""
    if len(secret) < 16:
        raise errors.ValidationError("ADMIN_API_KEY must be at least 16 characters long")
    with tenancy.across_tenants(db, "seed-admin-key"):
        return _seed(db, secret)


def _seed(db: Session, secret: str) -> tuple[AdminApiKey, list[AdminApiKey]]:
    from chalicelib.services.accounts import audit  # late: audit imports the account models

    key = db.scalar(select(AdminApiKey).where(AdminApiKey.key_hash == hash_secret(secret)))
    if key is None:
        key = AdminApiKey(name="seeded from ADMIN_API_KEY", key_hash=hash_secret(secret),
                          key_hint=hint(secret), seeded=True)
        db.add(key)
    key.revoked_at = None
    db.flush()
    previous = list(db.scalars(select(AdminApiKey).where(
        AdminApiKey.seeded.is_(True), AdminApiKey.id != key.id,
        AdminApiKey.revoked_at.is_(None)).order_by(AdminApiKey.id)))
    for old in previous:
        old.revoked_at = clock.now()
        audit.record(db, "admin_api_key_revoked", details=(
            f"key {old.id} ({old.key_hint}) by a changed ADMIN_API_KEY at start"))
    db.flush()
    return key, previous


def authenticate(db: Session, secret: str) -> AdminApiKey:
    key = db.scalar(select(AdminApiKey).where(AdminApiKey.key_hash == hash_secret(secret)))
    if key is None or key.revoked_at is not None:
        observability.log("admin_key.rejected", "warning", revoked_key_id=key and key.id)
        raise errors.Unauthorized("invalid admin API key")
    now = clock.now()
    if key.last_used_at is None or now - key.last_used_at > timedelta(minutes=1):
        key.last_used_at = now
    return key


def active_keys_query():
    return select(AdminApiKey).where(AdminApiKey.revoked_at.is_(None)).order_by(AdminApiKey.id)


def revoke(db: Session, key_id: int) -> AdminApiKey:
    key = db.get(AdminApiKey, key_id)
    if key is None or key.revoked_at is not None:
        raise errors.NotFound(f"no admin API key {key_id}")
    key.revoked_at = clock.now()
    return key
