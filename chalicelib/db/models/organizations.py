"""Tenancy: organizations, their mail servers, sending domains, credentials, IP pools, admin keys."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime

from typing import Any

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text,
                        UniqueConstraint)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from chalicelib.db.base import Base, Timestamps, uuid_column


class Organization(Timestamps, Base):
    __tablename__ = "organizations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    permalink: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    time_zone: Mapped[str] = mapped_column(String(64), default="UTC", nullable=False)

    servers: Mapped[list["Server"]] = relationship(
        back_populates="organization", cascade="all, delete-orphan", passive_deletes=True
    )


class IPPool(Timestamps, Base):
    __tablename__ = "ip_pools"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    name: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    is_default: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    # host:port of the relay that sends this pool's mail from its addresses, for workers on
    # hosts that own none of them (Lambda behind NAT): services/delivery/egress.py
    relay_host: Mapped[str | None] = mapped_column(String(255))

    ip_addresses: Mapped[list["IPAddress"]] = relationship(
        back_populates="ip_pool", cascade="all, delete-orphan", passive_deletes=True,
        order_by="IPAddress.id",
    )


class IPAddress(Timestamps, Base):
    __tablename__ = "ip_addresses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ip_pool_id: Mapped[int] = mapped_column(
        ForeignKey("ip_pools.id", ondelete="CASCADE"), index=True, nullable=False
    )
    ipv4: Mapped[str | None] = mapped_column(String(15))
    ipv6: Mapped[str | None] = mapped_column(String(39))
    hostname: Mapped[str] = mapped_column(String(255), nullable=False)
    priority: Mapped[int] = mapped_column(Integer, default=100, nullable=False)
    # The last reverse-DNS check (services/delivery/address_health.py): {"records": [...]}.
    dns_check: Mapped[Any | None] = mapped_column(JSON)
    checked_at: Mapped[datetime | None] = mapped_column(DateTime(), index=True)

    ip_pool: Mapped[IPPool] = relationship(back_populates="ip_addresses")


class Server(Timestamps, Base):
    """A mail server: the unit that owns domains, credentials, messages and webhooks."""

    __tablename__ = "servers"
    __table_args__ = (UniqueConstraint("organization_id", "permalink"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    organization_id: Mapped[int] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True, nullable=False
    )
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    permalink: Mapped[str] = mapped_column(String(64), nullable=False)
    mode: Mapped[str] = mapped_column(String(16), default="Live", nullable=False)
    suspended_at: Mapped[datetime | None] = mapped_column(DateTime())
    suspension_reason: Mapped[str | None] = mapped_column(String(255))
    ip_pool_id: Mapped[int | None] = mapped_column(ForeignKey("ip_pools.id", ondelete="SET NULL"))
    track_opens: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    track_clicks: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    message_retention_days: Mapped[int] = mapped_column(Integer, default=60, nullable=False)
    # How long its messages' content (raw source, signed copy) is kept; at most
    # message_retention_days. After it the retention run erases the bytes and the record
    # stays (services/messages/content_retention.py).
    content_retention_days: Mapped[int] = mapped_column(Integer, default=45, server_default="45",
                                                        nullable=False)
    # Send limits (services/sending/limits.py): messages per hour/day, None = no limit; over the
    # limit messages are held ("hold") or refused ("reject").
    send_limit_per_hour: Mapped[int | None] = mapped_column(Integer)
    send_limit_per_day: Mapped[int | None] = mapped_column(Integer)
    send_limit_action: Mapped[str] = mapped_column(String(8), default="hold", server_default="hold",
                                                   nullable=False)

    organization: Mapped[Organization] = relationship(back_populates="servers")
    ip_pool: Mapped[IPPool | None] = relationship()

    @property
    def suspended(self) -> bool:
        return self.suspended_at is not None


class Domain(Timestamps, Base):
    """A sending domain. Its DKIM private key is stored encrypted (see services/security/secretbox.py)."""

    __tablename__ = "domains"
    __table_args__ = (UniqueConstraint("server_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    verification_token: Mapped[str] = mapped_column(String(64), nullable=False)
    verified_at: Mapped[datetime | None] = mapped_column(DateTime())
    dkim_selector: Mapped[str] = mapped_column(String(63), nullable=False)
    dkim_private_key_encrypted: Mapped[str] = mapped_column(Text, nullable=False)
    dkim_public_key: Mapped[str] = mapped_column(Text, nullable=False)
    track_opens: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    track_clicks: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    # Custom return path <return_path_host>.<name> CNAME RETURN_PATH_DOMAIN: used as the
    # envelope sender's domain once verified (services/domains/checks.py).
    return_path_host: Mapped[str] = mapped_column(String(63), default="rp", server_default="rp",
                                                  nullable=False)
    return_path_verified_at: Mapped[datetime | None] = mapped_column(DateTime())
    # Optional tracking domain <tracking_host>.<name> CNAME TRACKING_DOMAIN.
    tracking_host: Mapped[str | None] = mapped_column(String(63))
    tracking_verified_at: Mapped[datetime | None] = mapped_column(DateTime())
    # The last DNS check (services/domains/checks.py): {"records": [...]}.
    dns_check: Mapped[Any | None] = mapped_column(JSON)
    checked_at: Mapped[datetime | None] = mapped_column(DateTime(), index=True)

    server: Mapped[Server] = relationship()
    other_dkim_keys: Mapped[list["DkimKey"]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="DkimKey.id")

    @property
    def verified(self) -> bool:
        return self.verified_at is not None


class RetiredReturnPath(Base):
    """A return-path host name a domain no longer sends with (its host was changed, or the
    domain removed), kept while mail sent with it may still bounce: until ``keep_until``, the
    retirement plus its server's ``message_retention_days`` (those messages are deleted by
    then). The gateway accepts bounces and feedback reports at ``<token>@<name>`` meanwhile
    (services/inbound/return_path.py); one indexed lookup per RCPT, no scan of messages."""

    __tablename__ = "retired_return_paths"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    domain_id: Mapped[int | None] = mapped_column(
        ForeignKey("domains.id", ondelete="SET NULL"), index=True
    )
    name: Mapped[str] = mapped_column(String(255), index=True, nullable=False)  # lower-case
    retired_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    keep_until: Mapped[datetime] = mapped_column(DateTime(), index=True, nullable=False)


class DkimKey(Base):
    """A DKIM key of a domain beside the active one (which lives on the domain row, where the
    delivery worker reads it): ``pending`` after a rotation until activated, ``retiring``
    (still published, no longer signing) until ``retire_at``."""

    __tablename__ = "dkim_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    domain_id: Mapped[int] = mapped_column(
        ForeignKey("domains.id", ondelete="CASCADE"), index=True, nullable=False
    )
    selector: Mapped[str] = mapped_column(String(63), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)  # pending, retiring
    private_key_encrypted: Mapped[str | None] = mapped_column(Text)
    public_key: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    retire_at: Mapped[datetime | None] = mapped_column(DateTime(), index=True)


class InstallationKey(Base):
    """A rotated installation signing key (webhook signatures). Without any ``active`` row the
    key at SIGNING_KEY_PATH signs (id ``installation``); rotation adds a ``pending`` key,
    activation makes it ``active`` and the one before ``retiring`` until ``retire_at``."""

    __tablename__ = "installation_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key_id: Mapped[str] = mapped_column(String(63), unique=True, nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)  # pending, active, retiring
    # Encrypted with the SecretBox; None for the SIGNING_KEY_PATH key while it retires.
    private_key_encrypted: Mapped[str | None] = mapped_column(Text)
    public_key: Mapped[str] = mapped_column(Text, nullable=False)  # base64 DER (DKIM p=)
    created_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    activated_at: Mapped[datetime | None] = mapped_column(DateTime())
    retire_at: Mapped[datetime | None] = mapped_column(DateTime())


class Credential(Timestamps, Base):
    """API, SMTP or SMTP-IP credential. Keys are stored only as SHA-256 hashes."""

    __tablename__ = "credentials"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    type: Mapped[str] = mapped_column(String(16), nullable=False)  # API, SMTP, SMTP-IP
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    key_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    key_hint: Mapped[str | None] = mapped_column(String(16))  # last characters, for display
    ip_range: Mapped[str | None] = mapped_column(String(64))  # SMTP-IP: CIDR or address
    hold: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime())

    server: Mapped[Server] = relationship()


class AdminApiKey(Timestamps, Base):
    """Machine key with full management access. Stored as a SHA-256 hash; revoked keys are kept."""

    __tablename__ = "admin_api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    key_hint: Mapped[str] = mapped_column(String(16), nullable=False)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime())
    created_by_user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    seeded: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)


class ApiRateBucket(Base):
    """The token bucket of one API key (API_RATE_LIMIT_*, services/security/throttle.py): tokens left
    as of ``updated_at`` (epoch seconds), and whether the last request was let through."""

    __tablename__ = "api_rate_buckets"

    credential_id: Mapped[int] = mapped_column(
        ForeignKey("credentials.id", ondelete="CASCADE"), primary_key=True
    )
    tokens: Mapped[float] = mapped_column(Float, nullable=False)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False)
    allowed: Mapped[bool] = mapped_column(Boolean, nullable=False)
