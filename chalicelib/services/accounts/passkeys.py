"""Passkeys (WebAuthn): register one or more on an account, sign in with one instead of a
password and its second factor, or use one as the second factor after the password; rename
and remove them. The WebAuthn checks themselves (attestation, signatures, origin, relying
party, challenge, counters) are py_webauthn's (``webauthn``, pinned); we keep the state.

A ceremony is two requests: its options (with a fresh challenge) and the browser's answer.
Lambda keeps nothing between them, so the challenge waits in a PasskeyCeremony row, found
by the ceremony token handed to the client (stored only as a hash) and used up by one
conditional UPDATE, so an answer can never be replayed. Purposes:

- ``register``: a signed-in user adds a passkey (their password first, when they have one:
  a stolen session alone must not add a way in);
- ``login``: anyone; the browser offers the passkeys it holds for this site (discoverable
  credentials) and the one chosen names its account. User verification (PIN, biometrics)
  is required: the passkey alone then stands for both factors;
- ``second_factor``: after the password was checked (``users.password_before_passkey``),
  for that account's passkeys only.

A user with a passkey has two-factor authentication: the password alone no longer signs
them in (``PasskeyRequired``, or ``TOTPRequired`` when TOTP is on too; either factor then
completes it). Audit events: passkey_registered, passkey_renamed, passkey_removed (and
their failures), login with details naming the passkey, login_failed.

Tenancy (db/tenancy.py): a ceremony is no tenant's data (its row is read by its token); a
sign-in's answer names its passkey, and so the account, before anyone is signed in: that
lookup is the one place here that looks across tenants ("passkey-login"); the request then
acts for the person it found, as it does after the password of a second-factor sign-in
(``users.password_before_passkey``).
"""
from __future__ import annotations

import json
import uuid
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors, observability
from chalicelib.config import get_settings
from chalicelib.db import tenancy, unique
from chalicelib.db.models import Passkey, PasskeyCeremony, User, UserSession
from chalicelib.services.accounts import audit, users
from chalicelib.services.security.tokens import generate_secret, hash_secret

REGISTER, LOGIN, SECOND_FACTOR = "register", "login", "second_factor"
CEREMONY_TTL = timedelta(minutes=10)
TIMEOUT_MS = 5 * 60 * 1000  # what the browser is told; the row outlives it
MAX_PER_USER = 25
MAX_CREDENTIAL_ID_BYTES = 1023  # WebAuthn's limit


def user_handle(user: User) -> bytes:
    """The WebAuthn user handle: the account's random UUID (never the address)."""
    return uuid.UUID(user.uuid).bytes


def passkeys_of(db: Session, user_id: int) -> list[Passkey]:
    return list(db.scalars(select(Passkey).where(Passkey.user_id == user_id)
                           .order_by(Passkey.id)))


def find(db: Session, user: User, passkey_id: int) -> Passkey:
    passkey = db.get(Passkey, passkey_id)
    if passkey is None or passkey.user_id != user.id:
        raise errors.NotFound(f"you have no passkey {passkey_id}")
    return passkey


# --- ceremonies ---------------------------------------------------------------------------

def _begin(db: Session, purpose: str, user: User | None, options) -> dict:
    """Keep the options' challenge for the answer; returns {ceremony, options} for the client."""
    from webauthn.helpers import bytes_to_base64url, options_to_json  # lazily: cold start

    token = generate_secret("", 32)
    now = clock.now()
    db.add(PasskeyCeremony(token_hash=hash_secret(token), purpose=purpose,
                           user_id=user.id if user is not None else None,
                           challenge=bytes_to_base64url(options.challenge),
                           created_at=now, expires_at=now + CEREMONY_TTL))
    # Old ceremonies are of no use to anyone: clear them as we go.
    db.execute(PasskeyCeremony.__table__.delete().where(PasskeyCeremony.expires_at < now))
    db.flush()
    return {"ceremony": token, "options": json.loads(options_to_json(options))}


def _consume(db: Session, token: str, purposes: tuple[str, ...]) -> PasskeyCeremony:
    """The ceremony, used up now (one conditional UPDATE: a second answer finds it spent)."""
    row = db.scalar(select(PasskeyCeremony)
                    .where(PasskeyCeremony.token_hash == hash_secret(token or "")))
    now = clock.now()
    bad = errors.InvalidToken("ceremony: unknown, expired or already used; ask for new "
                              "options and try again", field="ceremony")
    if row is None or row.purpose not in purposes or row.used_at is not None \
            or row.expires_at <= now:
        raise bad
    claimed = db.execute(update(PasskeyCeremony)
                         .where(PasskeyCeremony.id == row.id, PasskeyCeremony.used_at.is_(None))
                         .values(used_at=now).execution_options(synchronize_session=False))
    if claimed.rowcount != 1:
        raise bad
    return row


def _descriptors(rows: list[Passkey]) -> list:
    from webauthn.helpers import base64url_to_bytes
    from webauthn.helpers.structs import AuthenticatorTransport, PublicKeyCredentialDescriptor

    known = {t.value for t in AuthenticatorTransport}
    return [PublicKeyCredentialDescriptor(
        id=base64url_to_bytes(p.credential_id),
        transports=[AuthenticatorTransport(t) for t in p.transports.split(",") if t in known]
        or None) for p in rows]


def _relying_party() -> tuple[str, list[str]]:
    settings = get_settings()
    return settings.effective_webauthn_rp_id, settings.effective_webauthn_origins


# --- registration -------------------------------------------------------------------------

def registration_options(db: Session, user: User, password: str | None,
                         client: audit.Client) -> dict:
    """Options for navigator.credentials.create(): a discoverable credential (a passkey)
    for this account, none of its existing ones again."""
    if user.password_hash is not None:
        if not password:
            raise errors.ParameterMissing("password: your password is needed to add a "
                                          "passkey", field="password")
        users.check_password(db, user, password, client, event="passkey_register_failed")
    existing = passkeys_of(db, user.id)
    if len(existing) >= MAX_PER_USER:
        raise errors.ValidationError(f"an account has at most {MAX_PER_USER} passkeys; "
                                     "remove one first")
    from webauthn import generate_registration_options
    from webauthn.helpers.structs import (AuthenticatorSelectionCriteria,
                                          ResidentKeyRequirement, UserVerificationRequirement)

    rp_id, _ = _relying_party()
    name = " ".join(filter(None, (user.first_name, user.last_name))) or user.email_address
    options = generate_registration_options(
        rp_id=rp_id, rp_name=get_settings().webauthn_rp_name, user_name=user.email_address,
        user_id=user_handle(user), user_display_name=name, timeout=TIMEOUT_MS,
        exclude_credentials=_descriptors(existing),
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.PREFERRED))
    return _begin(db, REGISTER, user, options)


def register(db: Session, user: User, ceremony: str, credential: dict, name: str | None,
             client: audit.Client) -> Passkey:
    """Check the browser's answer to the registration options and keep the passkey."""
    from webauthn import verify_registration_response
    from webauthn.helpers import bytes_to_base64url, parse_registration_credential_json

    row = _consume(db, ceremony, (REGISTER,))
    if row.user_id != user.id:
        raise errors.InvalidToken("ceremony: these options were made for another account",
                                  field="ceremony")
    rp_id, origins = _relying_party()
    try:
        parsed = parse_registration_credential_json(credential)
        verified = verify_registration_response(
            credential=parsed, expected_challenge=_challenge(row), expected_rp_id=rp_id,
            expected_origin=origins)
    except Exception as exc:  # noqa: BLE001  (any malformed answer is the client's error)
        reason = _reason(exc)
        audit.fail(db, errors.ValidationError(f"credential: the passkey could not be "
                                              f"registered: {reason}", field="credential"),
                   "passkey_registered", client, user=user, details=reason)
    credential_id = bytes_to_base64url(verified.credential_id)
    if len(verified.credential_id) > MAX_CREDENTIAL_ID_BYTES:
        raise errors.ValidationError("credential: its id is longer than WebAuthn allows",
                                     field="credential")
    registered = errors.ValidationError("credential: this passkey is already registered",
                                        field="credential")
    if db.scalar(select(Passkey.id).where(Passkey.credential_id == credential_id)):
        raise registered  # (row-level security shows this account's passkeys only)
    count = db.scalar(select(func.count()).select_from(Passkey)
                      .where(Passkey.user_id == user.id)) or 0
    passkey = Passkey(
        user_id=user.id, credential_id=credential_id,
        public_key=verified.credential_public_key, sign_count=verified.sign_count,
        name=(name or "").strip()[:100] or f"Passkey {count + 1}", aaguid=verified.aaguid,
        transports=",".join(t.value for t in parsed.response.transports or [])[:255],
        backed_up=verified.credential_backed_up, created_at=clock.now())
    with unique.guard(db, registered):  # another account's: its unique index says so
        db.add(passkey)
    audit.record(db, "passkey_registered", client, user=user,
                 details=f"passkey {passkey.id} ({passkey.name})")
    return passkey


def rename(db: Session, user: User, passkey_id: int, name: str, client: audit.Client) -> Passkey:
    passkey = find(db, user, passkey_id)
    cleaned = name.strip()
    if not cleaned:
        raise errors.ValidationError("name: must not be empty", field="name")
    old, passkey.name = passkey.name, cleaned[:100]
    audit.record(db, "passkey_renamed", client, user=user,
                 details=f"passkey {passkey.id}: {old} -> {passkey.name}")
    return passkey


def remove(db: Session, user: User, passkey_id: int, password: str | None,
           client: audit.Client) -> Passkey:
    """Remove a passkey; the password first, when the account has one (it may have been the
    second factor: removing it lowers the account's protection, as turning TOTP off does)."""
    passkey = find(db, user, passkey_id)
    if user.password_hash is not None:
        if not password:
            raise errors.ParameterMissing("password: your password is needed to remove a "
                                          "passkey", field="password")
        users.check_password(db, user, password, client, event="passkey_remove_failed")
    db.delete(passkey)
    db.flush()
    audit.record(db, "passkey_removed", client, user=user,
                 details=f"passkey {passkey.id} ({passkey.name})")
    return passkey


# --- signing in ---------------------------------------------------------------------------

def login_options(db: Session, email: str | None, password: str | None,
                  client: audit.Client) -> dict:
    """Options for navigator.credentials.get(). Without an address: a passkey sign-in (any
    passkey of this site, user verification required). With the address and password: the
    password is checked first (as a login attempt), then that account's passkeys are asked
    for as its second factor."""
    from webauthn import generate_authentication_options
    from webauthn.helpers.structs import UserVerificationRequirement

    rp_id, _ = _relying_party()
    if not email and not password:
        options = generate_authentication_options(
            rp_id=rp_id, timeout=TIMEOUT_MS,
            user_verification=UserVerificationRequirement.REQUIRED)
        return _begin(db, LOGIN, None, options)
    if not email or not password:
        field = "password" if email else "email_address"
        raise errors.ParameterMissing(f"{field}: send both the address and the password for "
                                      "a second factor, or neither for a passkey sign-in",
                                      field=field)
    user = users.password_before_passkey(db, email, password, client)
    mine = passkeys_of(db, user.id)
    if not mine:
        raise errors.ValidationError("this account has no passkey; sign in with the password "
                                     "(and the TOTP code when it uses one)")
    options = generate_authentication_options(
        rp_id=rp_id, timeout=TIMEOUT_MS, allow_credentials=_descriptors(mine),
        user_verification=UserVerificationRequirement.PREFERRED)
    return _begin(db, SECOND_FACTOR, user, options)


def login(db: Session, ceremony: str, credential: dict,
          client: audit.Client) -> tuple[User, UserSession, str]:
    """Check the browser's answer to the sign-in options; a new session when it holds."""
    from webauthn import verify_authentication_response
    from webauthn.helpers import parse_authentication_credential_json

    row = _consume(db, ceremony, (LOGIN, SECOND_FACTOR))
    wrong = errors.InvalidCredentials("the passkey could not be verified; try again")
    with tenancy.across_tenants(db, "passkey-login"):
        try:
            parsed = parse_authentication_credential_json(credential)
        except Exception as exc:  # noqa: BLE001
            audit.fail(db, errors.ValidationError(f"credential: {_reason(exc)}",
                                                  field="credential"),
                       "login_failed", client, details=f"passkey: {_reason(exc)}")
        passkey = db.scalar(select(Passkey).where(Passkey.credential_id == parsed.id))
        if passkey is None or (row.user_id is not None and passkey.user_id != row.user_id):
            user = db.get(User, row.user_id) if row.user_id is not None else None
            audit.fail(db, wrong, "login_failed", client, user=user,
                       details="passkey: not registered" + (" to this account" if user else ""))
        user = db.get(User, passkey.user_id)
    tenancy.act(db, tenancy.for_user(user.id))  # the answer's passkey named the person
    handle = parsed.response.user_handle
    if handle and handle != user_handle(user):
        audit.fail(db, wrong, "login_failed", client, user=user,
                   details="passkey: the user handle does not match its account")
    rp_id, origins = _relying_party()
    try:
        verified = verify_authentication_response(
            credential=parsed, expected_challenge=_challenge(row), expected_rp_id=rp_id,
            expected_origin=origins, credential_public_key=passkey.public_key,
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=row.purpose == LOGIN)
    except Exception as exc:  # noqa: BLE001
        audit.fail(db, wrong, "login_failed", client, user=user,
                   details=f"passkey {passkey.id}: {_reason(exc)}")
    passkey.sign_count = verified.new_sign_count
    passkey.backed_up = verified.credential_backed_up
    passkey.last_used_at = clock.now()
    how = "password and passkey" if row.purpose == SECOND_FACTOR else "passkey"
    return users.complete_login(db, user, client, details=f"{how} {passkey.id} ({passkey.name})")


def _challenge(row: PasskeyCeremony) -> bytes:
    from webauthn.helpers import base64url_to_bytes

    return base64url_to_bytes(row.challenge)


def _reason(exc: Exception) -> str:
    """What went wrong, for the client and the audit trail (never a stack trace)."""
    from webauthn.helpers.exceptions import WebAuthnException

    if isinstance(exc, WebAuthnException):
        return str(exc)[:300] or type(exc).__name__
    observability.log("passkeys.malformed_answer", "warning", error=type(exc).__name__,
                      details=str(exc)[:300])
    return "the answer is malformed"
