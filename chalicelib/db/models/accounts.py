"""People: users, organization memberships, invitations, sessions, resets, audit trail, SSO state,
passkeys and their ceremonies.

Every token (session, reset, invitation, OIDC state, passkey ceremony) is stored only as a
SHA-256 hash.
"""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import (Boolean, DateTime, ForeignKey, Integer, LargeBinary, String, Text,
                        UniqueConstraint)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from chalicelib import clock
if TYPE_CHECKING:  # the relationship's name, for the type checker (SQLAlchemy finds it by name)
    from chalicelib.db.models.organizations import Organization

from chalicelib.db.base import Base, BigId, Timestamps, uuid_column


class User(Timestamps, Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    email_address: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    first_name: Mapped[str] = mapped_column(String(255), default="", nullable=False)
    last_name: Mapped[str] = mapped_column(String(255), default="", nullable=False)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    admin: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    totp_secret_encrypted: Mapped[str | None] = mapped_column(Text)
    totp_enabled: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    totp_last_used_step: Mapped[int | None] = mapped_column(BigId)
    failed_login_attempts: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    locked_until: Mapped[datetime | None] = mapped_column(DateTime())
    last_login_at: Mapped[datetime | None] = mapped_column(DateTime())
    oidc_subject: Mapped[str | None] = mapped_column(String(255))
    oidc_issuer: Mapped[str | None] = mapped_column(String(255))

    memberships: Mapped[list["Membership"]] = relationship(
        back_populates="user", cascade="all, delete-orphan", passive_deletes=True
    )


class Membership(Timestamps, Base):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("organization_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    organization_id: Mapped[int] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True, nullable=False
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True, nullable=False
    )
    role: Mapped[str] = mapped_column(String(16), nullable=False)  # owner, admin, member, viewer

    user: Mapped[User] = relationship(back_populates="memberships")
    organization: Mapped["Organization"] = relationship()


class Invitation(Timestamps, Base):
    __tablename__ = "invitations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    organization_id: Mapped[int] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True, nullable=False
    )
    email_address: Mapped[str] = mapped_column(String(255), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    invited_by_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    expires_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    accepted_at: Mapped[datetime | None] = mapped_column(DateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime())

    organization: Mapped["Organization"] = relationship()


class UserSession(Base):
    __tablename__ = "user_sessions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True, nullable=False
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    ip_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime())

    user: Mapped[User] = relationship()


class PasswordResetToken(Base):
    __tablename__ = "password_reset_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True, nullable=False
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    used_at: Mapped[datetime | None] = mapped_column(DateTime())


class AuthEvent(Base):
    """The authentication audit trail (GET /api/v2/admin/auth_events)."""

    __tablename__ = "auth_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    event: Mapped[str] = mapped_column(String(64), index=True, nullable=False)
    success: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    email_address: Mapped[str | None] = mapped_column(String(255))
    ip_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    details: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(), default=clock.now, index=True, nullable=False
    )


class OidcLogin(Base):
    """Server-side state of one SSO attempt: Lambda has no memory between start and callback."""

    __tablename__ = "oidc_logins"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    state_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    nonce: Mapped[str] = mapped_column(String(128), nullable=False)
    code_verifier: Mapped[str] = mapped_column(String(128), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    used_at: Mapped[datetime | None] = mapped_column(DateTime())


class SmtpAuthFailure(Base):
    """Failed SMTP AUTH attempts of one client address in the current window, shared by every
    gateway task (smtp/ratelimit.py): a guesser spread over tasks is counted once."""

    __tablename__ = "smtp_auth_failures"

    address: Mapped[str] = mapped_column(String(64), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, nullable=False)
    window_started_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    last_failure_at: Mapped[datetime] = mapped_column(DateTime(), index=True, nullable=False)


class Passkey(Base):
    """A WebAuthn credential (passkey) of a user: its public key and what the authenticator
    told us at registration. ``credential_id`` is base64url (the form browsers use)."""

    __tablename__ = "passkeys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True, nullable=False
    )
    credential_id: Mapped[str] = mapped_column(String(1400), unique=True, nullable=False)
    public_key: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    sign_count: Mapped[int] = mapped_column(BigId, default=0, nullable=False)
    name: Mapped[str] = mapped_column(String(100), nullable=False)
    aaguid: Mapped[str | None] = mapped_column(String(36))
    transports: Mapped[str] = mapped_column(String(255), default="", nullable=False)
    backed_up: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime())


class PasskeyCeremony(Base):
    """Server-side state of one WebAuthn ceremony between its options and its answer (Lambda
    keeps nothing between two requests): the challenge, what it is for, and for whom. The
    client holds the ceremony token, stored here only as a hash; each is used once."""

    __tablename__ = "passkey_ceremonies"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    purpose: Mapped[str] = mapped_column(String(16), nullable=False)  # register, login, second_factor
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                                index=True)
    challenge: Mapped[str] = mapped_column(String(128), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(), index=True, nullable=False)
    used_at: Mapped[datetime | None] = mapped_column(DateTime())
