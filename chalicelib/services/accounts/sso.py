"""Single sign-on with OpenID Connect, over the protocol client in ``services/accounts/oidc.py``.

start: the login's state, nonce and PKCE verifier are kept server-side in an OidcLogin row
(Lambda keeps nothing between two requests), the state only as a SHA-256 hash, for 10 minutes.
callback: the state is consumed once (a conditional UPDATE), the code is exchanged and the ID
token validated; the account is found by (issuer, subject), else linked by a VERIFIED email
address, else created. The identity provider decides who may sign in: SSO creates accounts even
when self-registration is off. The callback finds and records the account across tenants
(db/tenancy.py, "sso-login"): the provider's identity names it.
"""
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db import tenancy
from chalicelib.db.models import OidcLogin, User, UserSession
from chalicelib.services.accounts import users, audit
from chalicelib.services.security.tokens import hash_secret

# The OIDC client is imported by the functions below, when single sign-on is used, not at cold
# start.
if TYPE_CHECKING:
    from chalicelib.services.accounts import oidc

STATE_TTL = timedelta(minutes=10)


def config() -> oidc.OIDCConfig:
    from chalicelib.services.accounts import oidc

    settings = get_settings()
    if not settings.auth_oidc_enabled:
        raise errors.SSODisabled("single sign-on is not enabled on this installation")
    return oidc.OIDCConfig(issuer=settings.auth_oidc_issuer.rstrip("/") or "",
                           client_id=settings.auth_oidc_client_id,
                           client_secret=settings.auth_oidc_client_secret or None,
                           redirect_uri=settings.auth_oidc_redirect_uri)


def start(db: Session) -> str:
    """The provider's authorization URL for a new login."""
    from chalicelib.services.accounts import oidc

    cfg = config()
    try:
        begun = oidc.start_login(cfg)
    except oidc.OIDCError as exc:
        raise errors.SSOError(exc.message) from None
    now = clock.now()
    db.add(OidcLogin(state_hash=hash_secret(begun.state), nonce=begun.nonce,
                     code_verifier=begun.code_verifier, expires_at=now + STATE_TTL))
    # Old attempts are of no use to anyone: clear them as we go.
    db.execute(OidcLogin.__table__.delete().where(OidcLogin.expires_at < now - STATE_TTL))
    db.flush()
    return begun.authorization_url


def _consume_state(db: Session, state: str) -> OidcLogin:
    row = db.scalar(select(OidcLogin).where(OidcLogin.state_hash == hash_secret(state or "")))
    now = clock.now()
    if row is None or row.used_at is not None or row.expires_at <= now:
        raise errors.SSOError("unknown, expired or already used login state; start the login again")
    claimed = db.execute(update(OidcLogin)
                         .where(OidcLogin.id == row.id, OidcLogin.used_at.is_(None))
                         .values(used_at=now).execution_options(synchronize_session=False))
    if claimed.rowcount != 1:
        raise errors.SSOError("this login state was already used; start the login again")
    return row


def _account_for(db: Session, identity: oidc.Identity, client: audit.Client) -> User:
    user = db.scalar(select(User).where(User.oidc_issuer == identity.issuer,
                                        User.oidc_subject == identity.subject))
    if user is not None:
        return user
    if not identity.email or not identity.email_verified:
        raise errors.SSOError("the identity provider did not assert a verified email address; "
                              "accounts are only linked or created by verified email")
    email = users.normalize_email(identity.email, "email")
    user = users.find_by_email(db, email)
    if user is not None:
        if user.oidc_subject is not None:
            raise errors.SSOError("this account is already linked to another single sign-on "
                                  "identity")
        event = "sso_linked"
    else:
        user = users.create_user(db, email=email, first_name=identity.given_name or "",
                                    last_name=identity.family_name or "")
        event = "sso_account_created"
    user.oidc_issuer, user.oidc_subject = identity.issuer, identity.subject
    audit.record(db, event, client, user=user, details=f"issuer {identity.issuer}")
    return user


def callback(db: Session, *, code: str | None, state: str | None, error: str | None,
             error_description: str | None, client: audit.Client) -> tuple[User, UserSession, str]:
    """Finish a login. Failures are recorded (and the state used up) before SSOError is raised."""
    cfg = config()
    with tenancy.across_tenants(db, "sso-login"):
        return _callback(db, cfg, code, state, error, error_description, client)


def _callback(db: Session, cfg, code: str | None, state: str | None, error: str | None,
              error_description: str | None, client: audit.Client
              ) -> tuple[User, UserSession, str]:
    from chalicelib.services.accounts import oidc

    try:
        if not state:
            raise errors.SSOError("the callback carried no state")
        login = _consume_state(db, state)
        if error:
            raise errors.SSOError(f"the identity provider refused the login: {error}"
                                  + (f" ({error_description[:200]})" if error_description else ""))
        if not code:
            raise errors.SSOError("the callback carried no authorization code")
        try:
            identity = oidc.complete_login(cfg, code=code, code_verifier=login.code_verifier,
                                           nonce=login.nonce)
        except oidc.OIDCError as exc:
            raise errors.SSOError(exc.message) from None
        user = _account_for(db, identity, client)
    except (errors.SSOError, errors.ValidationError) as exc:
        failure = exc if isinstance(exc, errors.SSOError) else errors.SSOError(exc.message)
        audit.fail(db, failure, "sso_failed", client, details=failure.message[:500])
    audit.record(db, "sso_login", client, user=user, details=f"issuer {identity.issuer}")
    return (user, *users.start_session(db, user, client))
