"""Two-factor authentication with TOTP (RFC 6238, pyotp): enroll, activate, disable, verify.

The secret is stored encrypted (keys.secret_box()). A code is accepted once: the time step it
belongs to is recorded in ``User.totp_last_used_step`` by a conditional UPDATE, so a replayed
code (or the same code sent twice at the same moment) is refused. One step of clock drift is
tolerated either way.
"""
from __future__ import annotations

import hmac

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.models import User
from chalicelib.services.accounts import audit
from chalicelib.services.security import keys
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import accounts as shape

INTERVAL = 30
ISSUER = "Email Service"


def _secret(user: User) -> str | None:
    if not user.totp_secret_encrypted:
        return None
    return keys.secret_box().decrypt_text(user.totp_secret_encrypted)


def _matching_step(secret: str, code: str) -> int | None:
    code = (code or "").replace(" ", "")
    if len(code) != 6 or not code.isdigit():
        return None
    import pyotp  # imported lazily: cold start

    totp = pyotp.TOTP(secret, interval=INTERVAL)
    current = int(clock.timestamp()) // INTERVAL
    found = None
    for step in (current - 1, current, current + 1):  # check all three: no early exit timing
        if hmac.compare_digest(totp.generate_otp(step), code):
            found = step
    return found


def consume_code(db: Session, user: User, code: str | None) -> bool:
    """True when ``code`` is valid now and was not used before (it is then used up)."""
    secret = _secret(user)
    if not secret or not code:
        return False
    step = _matching_step(secret, code)
    if step is None:
        return False
    result = db.execute(
        update(User)
        .where(User.id == user.id, or_(User.totp_last_used_step.is_(None),
                                       User.totp_last_used_step < step))
        .values(totp_last_used_step=step)
        .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        return False
    user.totp_last_used_step = step
    return True


@builds(shape.TotpEnrollment)
def enroll(db: Session, user: User, client: audit.Client) -> dict:
    if user.totp_enabled:
        raise errors.ValidationError(
            "two-factor authentication is already enabled; disable it first to enroll again")
    import pyotp  # imported lazily: cold start

    secret = pyotp.random_base32()  # 160 bits
    user.totp_secret_encrypted = keys.secret_box().encrypt(secret)
    user.totp_last_used_step = None
    audit.record(db, "totp_enrolled", client, user=user)
    hostname = get_settings().smtp_hostname
    issuer = ISSUER if hostname in ("", "localhost") else hostname
    uri = pyotp.TOTP(secret, interval=INTERVAL).provisioning_uri(name=user.email_address,
                                                                 issuer_name=issuer)
    return {"secret": secret, "otpauth_url": uri, "totp_enabled": False}


def activate(db: Session, user: User, code: str, client: audit.Client) -> None:
    if user.totp_enabled:
        raise errors.ValidationError("two-factor authentication is already enabled")
    if not user.totp_secret_encrypted:
        raise errors.ValidationError("enroll first: POST /api/v2/auth/totp/enroll")
    if not consume_code(db, user, code):
        audit.fail(db, errors.InvalidTOTPCode("the code is wrong, expired or already used"),
                   "totp_enabled", client, user=user, details="invalid code")
    user.totp_enabled = True
    audit.record(db, "totp_enabled", client, user=user)


def disable(db: Session, user: User, client: audit.Client) -> None:
    """The caller checked the password already."""
    if not user.totp_enabled and not user.totp_secret_encrypted:
        raise errors.ValidationError("two-factor authentication is not enabled")
    user.totp_enabled = False
    user.totp_secret_encrypted = None
    user.totp_last_used_step = None
    audit.record(db, "totp_disabled", client, user=user)
