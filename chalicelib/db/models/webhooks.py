"""Webhooks, their durable delivery queue rows, and the log of every attempt."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base, BigId, Timestamps, uuid_column


class Webhook(Timestamps, Base):
    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    url: Mapped[str] = mapped_column(String(2048), nullable=False)
    events: Mapped[list[str]] = mapped_column(JSON, default=list, nullable=False)  # [] = all
    sign: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    headers_encrypted: Mapped[str | None] = mapped_column(Text)  # SecretBox token of a JSON object
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime())


class WebhookRequest(Base):
    """A pending delivery: the row is the truth, the queue message only wakes a worker."""

    __tablename__ = "webhook_requests"
    __table_args__ = (Index("ix_webhook_requests_due", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True, nullable=False
    )
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"))
    event: Mapped[str] = mapped_column(String(32), nullable=False)
    uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    body: Mapped[str] = mapped_column(Text, nullable=False)  # the exact JSON bytes that are signed
    attempts: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    locked_by: Mapped[str | None] = mapped_column(String(64))
    locked_at: Mapped[datetime | None] = mapped_column(DateTime())
    woken_at: Mapped[datetime | None] = mapped_column(DateTime())  # see Message.woken_at
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class WebhookRequestLog(Base):
    """One attempt: never holds a custom header value."""

    __tablename__ = "webhook_request_logs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True, nullable=False
    )
    event: Mapped[str] = mapped_column(String(32), nullable=False)
    uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    url: Mapped[str] = mapped_column(String(2048), nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False)
    status_code: Mapped[int | None] = mapped_column(Integer)
    success: Mapped[bool] = mapped_column(Boolean, nullable=False)
    response_body: Mapped[str | None] = mapped_column(Text)  # first 2 KB
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    will_retry: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime())  # when will_retry
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    payload: Mapped[Any | None] = mapped_column(JSON)
