"""Sending controls: idempotency keys of send requests, send-limit counters, bulk jobs."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base, BigId


class IdempotencyKey(Base):
    """One Idempotency-Key of a server (services/sending/idempotency.py). Inserted in the request's
    own transaction before it does anything, completed with the answer in that same
    transaction: a concurrent duplicate waits on the primary key until the first commits
    (then replays the answer) or rolls back (then runs itself)."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_created_at", "created_at"),)

    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[str | None] = mapped_column(Text)  # the answer's `data`, as JSON
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class SendLimitCounter(Base):
    """Messages a server sent in its current hour or day window (services/sending/limits.py):
    one row per server and period, reset when a new window starts."""

    __tablename__ = "send_limit_counters"

    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), primary_key=True)
    period: Mapped[str] = mapped_column(String(8), primary_key=True)  # hour, day
    window_start: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    used: Mapped[int] = mapped_column(Integer, nullable=False)


class BulkJob(Base):
    """A bulk action on a server's messages (services/messages/bulk.py), carried out in
    chunks by the bulk worker. ``cursor`` is the last message id handled: a chunk's actions
    and the cursor commit together, so a worker that dies resumes where the last commit left
    it and no message is acted on twice. Claimed like every other row (claims.py)."""

    __tablename__ = "bulk_jobs"
    __table_args__ = (Index("ix_bulk_jobs_due", "status", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False)
    action: Mapped[str] = mapped_column(String(16), nullable=False)  # release, retry, cancel
    filter: Mapped[Any] = mapped_column(JSON, nullable=False)
    status: Mapped[str] = mapped_column(String(16), default="Queued", nullable=False)
    matched: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    done: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    failed: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    max_message_id: Mapped[int] = mapped_column(BigId, nullable=False)  # the snapshot's end
    cursor: Mapped[int] = mapped_column(BigId, default=0, nullable=False)
    details: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime())
    locked_by: Mapped[str | None] = mapped_column(String(64))
    locked_at: Mapped[datetime | None] = mapped_column(DateTime())
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(), default=clock.now, onupdate=clock.now, nullable=False)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime())
