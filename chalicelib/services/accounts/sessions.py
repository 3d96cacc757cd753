"""Bearer sessions: created at login, looked up on every call, revoked at logout or password change.

The token is 256 random bits from ``secrets``; only its SHA-256 hash is stored, and the lookup
is by that hash (an index lookup on a digest leaks nothing usable about the token). The token
names its person: the lookup is across tenants (db/tenancy.py), and the caller then acts for
that person.
"""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session, joinedload

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db import tenancy
from chalicelib.db.models import User, UserSession
from chalicelib.services.security.tokens import generate_secret, hash_secret


def authenticate_session(db: Session, token: str) -> UserSession:
    with tenancy.across_tenants(db, "session-lookup"):
        session = db.scalar(select(UserSession).options(
            joinedload(UserSession.user).selectinload(User.memberships))
            .where(UserSession.token_hash == hash_secret(token)))
        now = clock.now()
        if session is None or session.revoked_at is not None or session.expires_at <= now:
            raise errors.Unauthorized("invalid or expired session token")
        if session.last_used_at is None or now - session.last_used_at > timedelta(minutes=1):
            session.last_used_at = now
    return session


def create_session(db: Session, user: User, ip_address: str | None = None,
                   user_agent: str | None = None) -> tuple[UserSession, str]:
    token = generate_secret("", 32)
    session = UserSession(user_id=user.id, token_hash=hash_secret(token),
                          ip_address=(ip_address or None) and ip_address[:64],
                          user_agent=(user_agent or None) and user_agent[:512],
                          expires_at=clock.now() + timedelta(days=get_settings().auth_session_timeout_days))
    db.add(session)
    db.flush()
    return session, token


def revoke(session: UserSession) -> None:
    if session.revoked_at is None:
        session.revoked_at = clock.now()


def revoke_all(db: Session, user_id: int, *, except_id: int | None = None) -> int:
    """Revoke every live session of a user (but ``except_id``); returns how many."""
    stmt = update(UserSession).where(UserSession.user_id == user_id,
                                     UserSession.revoked_at.is_(None))
    if except_id is not None:
        stmt = stmt.where(UserSession.id != except_id)
    result = db.execute(stmt.values(revoked_at=clock.now())
                        .execution_options(synchronize_session="fetch"))
    return result.rowcount or 0


def live_sessions_query(user_id: int):
    """The user's sessions that still work, most recently used first."""
    return (select(UserSession)
            .where(UserSession.user_id == user_id, UserSession.revoked_at.is_(None),
                   UserSession.expires_at > clock.now())
            .order_by(UserSession.last_used_at.desc().nulls_last(), UserSession.id.desc()))


def find_live_session(db: Session, user_id: int, session_id: int) -> UserSession:
    """One of the user's working sessions (NotFound for another user's, or a dead one: the
    answer does not tell which)."""
    session = db.scalar(live_sessions_query(user_id).where(UserSession.id == session_id))
    if session is None:
        raise errors.NotFound(f"no active session {session_id}")
    return session


