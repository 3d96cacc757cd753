"""Rotation of the installation key that signs webhooks (and inbound HTTP endpoint posts).

Until the first rotation the key at SIGNING_KEY_PATH signs (key id ``installation``).
``rotate`` makes a new RSA-2048 key, ``pending``: its public half is shown so the operator
publishes it (DKIM record ``<key id>._domainkey.<SMTP_HOSTNAME>``, PEM for receivers) before
it signs anything. ``activate`` makes it sign and lists the one before as ``retiring`` for
DKIM_RETIRING_DAYS: during that overlap both public keys are published, so a receiver that
verifies with either accepts what it gets; after it the old key is dropped. Every signed
request names its key in ``X-Service-Signature-Key``.

The SIGNING_KEY_PATH key itself stays the root of what it derives (the SecretBox when
ENCRYPTION_KEY is empty, the open-tracking HMAC): rotation replaces only the signing key.
Rotated private keys are stored encrypted with the SecretBox.

No HTTP endpoint serves these public keys (the API contract says none does): operators use
``python -m chalicelib.deploy_tasks signing-key show|rotate|activate`` (or the ``migrate`` Lambda
with ``{"signing_key": "show|rotate|activate"}``).
"""
from __future__ import annotations

import secrets
import threading
import time
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.models import InstallationKey
from chalicelib.services.security import keys, signing

FILE_KEY_ID = "installation"
PENDING, ACTIVE, RETIRING = "pending", "active", "retiring"
CACHE_SECONDS = 60.0  # other processes pick an activation up within this (both keys are valid)

_lock = threading.Lock()
_current: tuple[float, str, object] | None = None
_loaded: dict[str, object] = {}


def _load_private(row: InstallationKey):
    key = _loaded.get(row.key_id)
    if key is None:
        from cryptography.hazmat.primitives import serialization

        pem = keys.secret_box().decrypt(row.private_key_encrypted)
        # Generated here and stored under authenticated encryption: skip the RSA
        # consistency check (~30 ms of CPU per key and process).
        key = _loaded[row.key_id] = serialization.load_pem_private_key(
            pem, password=None, unsafe_skip_rsa_key_validation=True)
    return key


def clear_cache() -> None:
    global _current
    with _lock:
        _current = None


def current(db: Session | None = None) -> tuple[str, object]:
    """(key id, RSA private key) that signs now; cached for CACHE_SECONDS."""
    global _current
    cached = _current
    if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1], cached[2]
    if db is None:
        from chalicelib.db import session_scope

        with session_scope() as session:
            return current(session)
    row = db.scalar(select(InstallationKey).where(InstallationKey.state == ACTIVE))
    key_id, key = (FILE_KEY_ID, keys.signing_key()) if row is None else \
        (row.key_id, _load_private(row))
    with _lock:
        _current = (time.monotonic(), key_id, key)
    return key_id, key


def sign(body: bytes) -> tuple[str, str]:
    """(key id, base64 signature) of ``body`` with the current key."""
    key_id, key = current()
    return key_id, signing.sign_body(key, body)


def _file_public_b64() -> str:
    return signing.public_key_b64(keys.signing_key())


def listed(db: Session) -> list[dict]:
    """The keys to publish: the active one, a pending one and retiring ones (until their
    retire_at), in that order."""
    now = clock.now()
    rows = list(db.scalars(select(InstallationKey).order_by(InstallationKey.id)))
    rows = [r for r in rows if not (r.state == RETIRING and r.retire_at and r.retire_at <= now)]
    entries = []
    if not any(r.state == ACTIVE for r in rows) and not any(r.key_id == FILE_KEY_ID
                                                           for r in rows):
        entries.append(_entry(FILE_KEY_ID, ACTIVE, _file_public_b64(), None, None))
    entries += [_entry(r.key_id, r.state, r.public_key, r.activated_at, r.retire_at)
                for r in rows]
    order = {ACTIVE: 0, PENDING: 1, RETIRING: 2}
    return sorted(entries, key=lambda e: order[e["state"]])  # stable: by id within a state


def _entry(key_id: str, state: str, public_b64: str, activated_at, retire_at) -> dict:
    import base64

    from cryptography.hazmat.primitives import serialization

    public = serialization.load_der_public_key(base64.b64decode(public_b64))
    return {"key_id": key_id, "state": state, "activated_at": activated_at,
            "retire_at": retire_at,
            "dns_record": {"type": "TXT",
                           "name": f"{key_id}._domainkey.{get_settings().smtp_hostname}",
                           "value": f"v=DKIM1; k=rsa; p={public_b64}"},
            "public_key_pem": signing.public_key_pem(public).decode()}


def rotate(db: Session) -> dict:
    """A new pending key (replacing a pending one never activated)."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    for old in db.scalars(select(InstallationKey).where(InstallationKey.state == PENDING)):
        db.delete(old)
    key = rsa.generate_private_key(public_exponent=signing.PUBLIC_EXPONENT,
                                   key_size=signing.KEY_SIZE)
    key_id = f"k{clock.now():%Y%m%d}-{secrets.token_hex(3)}"
    row = InstallationKey(key_id=key_id, state=PENDING,
                          private_key_encrypted=keys.secret_box().encrypt(
                              signing.private_key_pem(key)),
                          public_key=signing.public_key_b64(key), created_at=clock.now())
    db.add(row)
    db.flush()
    return _entry(row.key_id, row.state, row.public_key, None, None)


def activate(db: Session) -> list[dict]:
    pending = db.scalar(select(InstallationKey).where(InstallationKey.state == PENDING))
    if pending is None:
        raise errors.ValidationError("no signing key is pending: rotate first", field="key")
    now = clock.now()
    retire_at = now + timedelta(days=get_settings().dkim_retiring_days)
    active = db.scalar(select(InstallationKey).where(InstallationKey.state == ACTIVE))
    if active is not None:
        active.state, active.retire_at = RETIRING, retire_at
    else:  # the SIGNING_KEY_PATH key retires: listed from its public half only
        file_row = db.scalar(select(InstallationKey)
                             .where(InstallationKey.key_id == FILE_KEY_ID))
        if file_row is None:
            db.add(InstallationKey(key_id=FILE_KEY_ID, state=RETIRING, private_key_encrypted=None,
                                   public_key=_file_public_b64(), created_at=now,
                                   retire_at=retire_at))
    pending.state, pending.activated_at = ACTIVE, now
    db.flush()
    clear_cache()
    return listed(db)
