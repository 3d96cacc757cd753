"""User accounts: registration, login (lockout, TOTP, a passkey as second factor), logout,
profile, password change and reset.

Failures that must outlive the failing request (failed-login counters, lockouts, audit rows)
are committed before the error is raised (``audit.fail``).

An address (login, a password-reset request) or a reset token names an account nobody is
signed in as yet, an address must be unique among all accounts, and a new account belongs to
no one: those steps look across tenants (db/tenancy.py, "account-lookup"), here only.
"""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import case, exists, or_, select, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db import tenancy, unique
from chalicelib.db.models import Membership, Passkey, PasswordResetToken, User, UserSession
from chalicelib.services.accounts import audit, passwords, sessions, totp
from chalicelib.services.security.tokens import generate_secret, hash_secret
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import accounts as shape

NAME_FIELDS = ("first_name", "last_name")


def normalize_email(value: str, field: str = "email_address") -> str:
    """One spelling per address (lower case), so uniqueness and lookups agree."""
    from email_validator import EmailNotValidError, validate_email  # lazily: cold start

    try:
        result = validate_email((value or "").strip(), check_deliverability=False)
    except EmailNotValidError as exc:
        raise errors.ValidationError(f"{field}: {exc}", field=field) from None
    return result.normalized.lower()


def find_by_email(db: Session, email: str) -> User | None:
    return db.scalar(select(User).where(User.email_address == email))


def _address_taken(email: str) -> errors.ValidationError:
    return errors.ValidationError(f"email_address: an account for {email} already exists",
                                  field="email_address")


def change_email(db: Session, user: User, value: str) -> str | None:
    """Set the user's address (normalized; unique). Returns the old address, or None when
    it is the same address."""
    email = normalize_email(value)
    if email == user.email_address:
        return None
    with tenancy.across_tenants(db, "account-lookup"):  # unique among all accounts
        taken = find_by_email(db, email) is not None
    if taken:
        raise _address_taken(email)
    old = user.email_address
    with unique.guard(db, _address_taken(email)):  # two users moving to it at once
        user.email_address = email
    return old


def change_own_email(db: Session, user: User, value: str, current_password: str | None,
                     client: audit.Client) -> None:
    """A user changing their own address: re-authenticated with the current password (a
    stolen session alone must not move the account, and with it password resets)."""
    if normalize_email(value) == user.email_address:
        return
    if not current_password:
        raise errors.ParameterMissing("current_password: your password is needed to change "
                                      "your email address", field="current_password")
    check_password(db, user, current_password, client, "current_password",
                   event="email_change_failed")
    old = change_email(db, user, value)
    audit.record(db, "email_changed", client, user=user, details=f"from {old}")


def any_user_exists(db: Session) -> bool:
    """False only on a new installation (the console then offers its first-run page)."""
    with tenancy.across_tenants(db, "account-lookup"):
        return bool(db.scalar(select(exists().where(User.id.isnot(None)))))


def frontend_link(path: str) -> str | None:
    base = get_settings().effective_frontend_url
    return f"{base}/{path}" if base else None


def create_user(db: Session, *, email: str, first_name: str = "", last_name: str = "",
                password: str | None = None, admin: bool = False) -> User:
    email = normalize_email(email)
    if password is not None:
        passwords.validate_new(password)
    if db.scalar(select(exists().where(User.email_address == email))):
        raise _address_taken(email)
    user = User(email_address=email, first_name=(first_name or "").strip(),
                last_name=(last_name or "").strip(), admin=admin,
                password_hash=passwords.hash_password(password) if password is not None else None)
    with unique.guard(db, _address_taken(email)):  # a concurrent registration of the address
        db.add(user)
    return user


def register(db: Session, *, email: str, first_name: str, last_name: str, password: str,
             client: audit.Client) -> tuple[User, UserSession, str]:
    if not get_settings().auth_allow_registration:
        raise errors.RegistrationDisabled("self-registration is disabled on this installation")
    with tenancy.across_tenants(db, "account-lookup"):
        user = create_user(db, email=email, first_name=first_name, last_name=last_name,
                           password=password)
        audit.record(db, "registration", client, user=user)
        return (user, *start_session(db, user, client))


def start_session(db: Session, user: User, client: audit.Client) -> tuple[UserSession, str]:
    user.last_login_at = clock.now()
    return sessions.create_session(db, user, client.ip_address, client.user_agent)


def is_locked(user: User) -> bool:
    return user.locked_until is not None and user.locked_until > clock.now()


def _locked_error(user: User) -> errors.AccountLocked:
    if user.locked_until is None:  # lifted between the refusal and this message
        return errors.AccountLocked("too many failed logins; try again later")
    until = user.locked_until.replace(microsecond=0).isoformat() + "Z"
    return errors.AccountLocked(f"too many failed logins; the account is locked until {until}")


def _unlocked(now):
    return or_(User.locked_until.is_(None), User.locked_until <= now)


def _reserve_attempt(db: Session, user: User, client: audit.Client, event: str):
    """Count this attempt as a failure *before* the password is checked, in one conditional
    UPDATE that also locks when it is the last one allowed, and commit it. Parallel guesses
    therefore each take a numbered slot: at most ``auth.max_login_attempts`` password checks
    run per lockout window, however many arrive at once (the counter is reset to 0 as it locks,
    and no slot is handed out while locked). Returns the lock this attempt set, or None.
    A locked account is refused here, without a password check."""
    settings = get_settings()
    now = clock.now()
    until = now + timedelta(minutes=settings.auth_lockout_minutes)
    reaching = User.failed_login_attempts + 1 >= settings.auth_max_login_attempts
    row = db.execute(update(User).where(User.id == user.id, _unlocked(now))
                     .values(failed_login_attempts=case((reaching, 0),
                                                        else_=User.failed_login_attempts + 1),
                             locked_until=case((reaching, until), else_=User.locked_until))
                     .returning(User.failed_login_attempts, User.locked_until)
                     .execution_options(synchronize_session=False)).first()
    if row is None:
        user.locked_until = db.scalar(select(User.locked_until).where(User.id == user.id))
        audit.fail(db, _locked_error(user), event, client, user=user, details="account locked")
    user.failed_login_attempts, user.locked_until = row
    db.commit()  # the slot is taken even if this request dies during the check
    return row.locked_until if row.locked_until == until else None


def _fail_attempt(db: Session, user: User, mine, client: audit.Client, reason: str,
                  error: errors.ServiceError, event: str = "login_failed"):
    """A failed check: already counted by ``_reserve_attempt``; when that attempt was the one
    that locked, say so (the lockout event) rather than the plain failure."""
    if mine is not None:
        settings = get_settings()
        audit.record(db, event, client, user=user, success=False, details=reason)
        audit.fail(db, _locked_error(user), "lockout", client, user=user,
                   details=f"{settings.auth_max_login_attempts} failed attempts; "
                           f"locked for {settings.auth_lockout_minutes} minutes")
    audit.fail(db, error, event, client, user=user, details=reason)


def _accept_attempt(db: Session, user: User, mine, client: audit.Client, event: str) -> None:
    """The password (and code) were right: clear the counter, re-reading the lock in the same
    statement. If parallel wrong attempts locked the account meanwhile, refuse; a lock this
    very attempt set (it took the last slot) is lifted."""
    now = clock.now()
    allowed = _unlocked(now) if mine is None else or_(_unlocked(now), User.locked_until == mine)
    done = db.execute(update(User).where(User.id == user.id, allowed)
                      .values(failed_login_attempts=0, locked_until=None)
                      .execution_options(synchronize_session=False))
    if done.rowcount != 1:
        user.locked_until = db.scalar(select(User.locked_until).where(User.id == user.id))
        audit.fail(db, _locked_error(user), event, client, user=user,
                   details="account locked by parallel failed attempts")
    user.failed_login_attempts = 0
    user.locked_until = None


def _refund_attempt(db: Session, user: User, mine) -> None:
    """The password was right but the request is not a login attempt yet (TOTP code missing):
    give its slot back, and lift a lock it set."""
    if mine is not None:
        db.execute(update(User).where(User.id == user.id, User.locked_until == mine)
                   .values(failed_login_attempts=get_settings().auth_max_login_attempts - 1,
                           locked_until=None)
                   .execution_options(synchronize_session=False))
    else:
        db.execute(update(User).where(User.id == user.id, User.failed_login_attempts > 0)
                   .values(failed_login_attempts=User.failed_login_attempts - 1)
                   .execution_options(synchronize_session=False))


def _password_step(db: Session, email: str, password: str,
                   client: audit.Client) -> tuple[User, object]:
    """The first factor of a login: the account by its address and its password, counted as
    an attempt (``_reserve_attempt``). Returns the user and the lock this attempt set."""
    try:
        email = normalize_email(email)
    except errors.ValidationError:
        email = (email or "").strip().lower()
    user = find_by_email(db, email)
    wrong = errors.InvalidCredentials("wrong email address or password")
    if user is None:
        passwords.verify_dummy(password)  # same time as a real check
        audit.fail(db, wrong, "login_failed", client, email=email[:255], details="unknown address")
    mine = _reserve_attempt(db, user, client, "login_failed")
    if not passwords.verify(user.password_hash, password):
        _fail_attempt(db, user, mine, client, "wrong password", wrong)
    return user, mine


def has_passkeys(db: Session, user: User) -> bool:
    return bool(db.scalar(select(exists().where(Passkey.user_id == user.id))))


def login(db: Session, *, email: str, password: str, totp_code: str | None,
          client: audit.Client) -> tuple[User, UserSession, str]:
    with tenancy.across_tenants(db, "account-lookup"):
        return _login(db, email, password, totp_code, client)


def _login(db: Session, email: str, password: str, totp_code: str | None,
           client: audit.Client) -> tuple[User, UserSession, str]:
    user, mine = _password_step(db, email, password, client)
    if user.totp_enabled:
        if not totp_code:
            _refund_attempt(db, user, mine)
            audit.fail(db, errors.TOTPRequired("this account uses two-factor authentication: "
                                               "send totp_code"),
                       "login_failed", client, user=user, details="totp_code missing")
        if not totp.consume_code(db, user, totp_code):
            _fail_attempt(db, user, mine, client, "invalid TOTP code",
                          errors.InvalidTOTPCode("the TOTP code is wrong, expired or already used"))
    elif has_passkeys(db, user):
        # A passkey is a second factor: the password alone no longer signs in.
        _refund_attempt(db, user, mine)
        audit.fail(db, errors.PasskeyRequired(
            "this account uses a passkey as its second factor: POST /api/v2/auth/passkeys/"
            "login/options with the address and password, then answer with the passkey"),
            "login_failed", client, user=user, details="passkey missing")
    _accept_attempt(db, user, mine, client, "login_failed")
    if passwords.needs_rehash(user.password_hash):
        user.password_hash = passwords.hash_password(password)
    audit.record(db, "login", client, user=user)
    return (user, *start_session(db, user, client))


def password_before_passkey(db: Session, email: str, password: str,
                            client: audit.Client) -> User:
    """The password of a login whose second factor will be a passkey: a wrong one counts as a
    failed login; a right one gives its attempt back (the login is not done yet), as a
    missing TOTP code does. The request then acts for that person (their passkeys)."""
    with tenancy.across_tenants(db, "account-lookup"):
        user, mine = _password_step(db, email, password, client)
        _refund_attempt(db, user, mine)
    tenancy.act(db, tenancy.for_user(user.id))
    return user


def complete_login(db: Session, user: User, client: audit.Client,
                   details: str) -> tuple[User, UserSession, str]:
    """A login proven another way than the password (a passkey): refused while the account
    is locked; clears the failed-login counter; the ``login`` audit event names the way."""
    _accept_attempt(db, user, None, client, "login_failed")
    audit.record(db, "login", client, user=user, details=details)
    return (user, *start_session(db, user, client))


def logout(db: Session, session: UserSession, client: audit.Client) -> None:
    sessions.revoke(session)
    audit.record(db, "logout", client, user=session.user)


def update_profile(user: User, changes: dict) -> User:
    for name in NAME_FIELDS:
        if changes.get(name) is not None:
            setattr(user, name, changes[name].strip())
    return user


def check_password(db: Session, user: User, password: str, client: audit.Client,
                   field: str = "password", event: str = "password_check_failed") -> None:
    """Re-authentication for sensitive changes; wrong guesses count toward the lockout too."""
    mine = _reserve_attempt(db, user, client, event)
    if not passwords.verify(user.password_hash, password):
        _fail_attempt(db, user, mine, client, f"wrong {field}",
                      errors.ValidationError(f"{field}: the password is wrong", field=field),
                      event=event)
    _accept_attempt(db, user, mine, client, event)


def set_password(db: Session, user: User, password: str, field: str = "password") -> None:
    """New password: every session and every outstanding reset token stops working."""
    passwords.validate_new(password, field)
    user.password_hash = passwords.hash_password(password)
    user.failed_login_attempts = 0
    user.locked_until = None
    sessions.revoke_all(db, user.id)
    db.execute(update(PasswordResetToken)
               .where(PasswordResetToken.user_id == user.id, PasswordResetToken.used_at.is_(None))
               .values(used_at=clock.now()).execution_options(synchronize_session=False))


def change_password(db: Session, user: User, *, current_password: str, new_password: str,
                    client: audit.Client) -> tuple[UserSession, str]:
    check_password(db, user, current_password, client, "current_password",
                   event="password_change_failed")
    set_password(db, user, new_password, "new_password")
    audit.record(db, "password_changed", client, user=user, details="all sessions revoked")
    return sessions.create_session(db, user, client.ip_address, client.user_agent)


RESET_REQUESTED = ("If an account exists for this address, a password reset has been recorded; "
                   "the operator of this installation hands out reset links.")


@builds(shape.PasswordReset)
def issue_password_reset(db: Session, user: User, client: audit.Client,
                         by: str = "operator") -> dict:
    token = generate_secret("", 32)
    expires = clock.now() + timedelta(hours=get_settings().password_reset_expiry_hours)
    db.add(PasswordResetToken(user_id=user.id, token_hash=hash_secret(token), expires_at=expires))
    db.flush()
    audit.record(db, "password_reset_issued", client, user=user, details=f"issued to {by}")
    return {"reset_token": token, "reset_url": frontend_link(f"password-reset/{token}"),
            "expires_at": expires}


@builds(shape.ResetRequested)
def request_password_reset(db: Session, email: str, client: audit.Client,
                           operator: bool) -> dict:
    """Public request: the same answer whether or not the address exists. Only an operator
    (admin API key: a frontend's back end that delivers the link itself) gets the token."""
    try:
        email = normalize_email(email)
    except errors.ValidationError:
        email = (email or "").strip().lower()
    with tenancy.across_tenants(db, "account-lookup"):
        user = find_by_email(db, email)
        audit.record(db, "password_reset_requested", client, user=user, email=email[:255],
                     success=user is not None)
        answer: dict = {"message": RESET_REQUESTED}
        if operator and user is not None:
            answer.update(issue_password_reset(db, user, client, by="admin API key"))
    return answer


def complete_password_reset(db: Session, *, token: str, password: str,
                            client: audit.Client) -> User:
    passwords.validate_new(password)
    with tenancy.across_tenants(db, "account-lookup"):
        return _complete_password_reset(db, token, password, client)


def _complete_password_reset(db: Session, token: str, password: str,
                             client: audit.Client) -> User:
    row = db.scalar(select(PasswordResetToken)
                    .where(PasswordResetToken.token_hash == hash_secret(token or "")))
    now = clock.now()
    bad = errors.ValidationError("token: the reset token is invalid, expired or already used",
                                 field="token")
    if row is None or row.used_at is not None or row.expires_at <= now:
        raise bad
    # Single use even under concurrency: only one UPDATE can flip used_at.
    claimed = db.execute(update(PasswordResetToken)
                         .where(PasswordResetToken.id == row.id,
                                PasswordResetToken.used_at.is_(None))
                         .values(used_at=now).execution_options(synchronize_session=False))
    if claimed.rowcount != 1:
        raise bad
    user = db.get(User, row.user_id)
    set_password(db, user, password)
    audit.record(db, "password_reset_completed", client, user=user, details="all sessions revoked")
    return user


def memberships(db: Session, user: User) -> list[Membership]:
    return list(db.scalars(select(Membership).where(Membership.user_id == user.id)
                           .order_by(Membership.id)))
