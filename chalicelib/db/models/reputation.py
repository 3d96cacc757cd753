"""Reputation: the per-server reputation guard's state and its ledger of counted bounces and
complaints, and infrastructure signals (refusals that blame the sending IP or domain).
services/reputation/ owns them."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime
from typing import Any

from sqlalchemy import (JSON, DateTime, Float, ForeignKey, Index, Integer, String, Text,
                        UniqueConstraint)
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base, BigId


class ReputationMark(Base):
    """One bounce about the address, or one complaint, counted toward its server's rates:
    at most one of each kind per message (the unique key), so a DSN sent twice, a bounce
    after a refusal at RCPT or a duplicate feedback report counts once. The rates are read
    from rolled-up counters (db/counters.py, metrics ``reputation:<kind>``) these rows move
    with, in the same transaction; the rows let ``counters.rebuild`` recount them."""

    __tablename__ = "reputation_marks"
    __table_args__ = (UniqueConstraint("message_id", "kind"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), nullable=False
    )
    kind: Mapped[str] = mapped_column(String(16), nullable=False)  # bounce, complaint
    reason: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class ServerReputation(Base):
    """The guard's state of one server: its last evaluation (figures, state), when a warning
    or pause began, and where its window starts after a pause was lifted (``window_start``,
    with ``baseline``: the counts already in that hour's bucket at the lift, not counted)."""

    __tablename__ = "server_reputations"

    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), primary_key=True
    )
    state: Mapped[str] = mapped_column(String(16), default="ok", server_default="ok",
                                       nullable=False)  # ok, warning, paused
    reason: Mapped[str | None] = mapped_column(Text)
    sent: Mapped[int] = mapped_column(Integer, default=0, server_default="0", nullable=False)
    delivered: Mapped[int] = mapped_column(Integer, default=0, server_default="0",
                                           nullable=False)
    bounces: Mapped[int] = mapped_column(Integer, default=0, server_default="0", nullable=False)
    complaints: Mapped[int] = mapped_column(Integer, default=0, server_default="0",
                                            nullable=False)
    bounce_rate: Mapped[float | None] = mapped_column(Float)
    complaint_rate: Mapped[float | None] = mapped_column(Float)
    evaluated_at: Mapped[datetime | None] = mapped_column(DateTime())
    warning_since: Mapped[datetime | None] = mapped_column(DateTime())
    paused_at: Mapped[datetime | None] = mapped_column(DateTime())
    window_start: Mapped[datetime | None] = mapped_column(DateTime())
    baseline: Mapped[Any | None] = mapped_column(JSON)
    lifted_at: Mapped[datetime | None] = mapped_column(DateTime())
    lifted_by: Mapped[str | None] = mapped_column(String(255))


class InfrastructureSignal(Base):
    """A refusal whose reason blames the sending infrastructure (``blames``: ``ip`` for a
    block list, IP reputation, PTR; ``domain`` for domain reputation or authentication), from
    an SMTP reply during delivery (``origin`` delivery) or a bounce (``origin`` bounce): which
    address and pool it left from, the sending domain, which receiver said it, its reply."""

    __tablename__ = "infrastructure_signals"
    __table_args__ = (
        Index("ix_infrastructure_signals_source_created", "source_address", "created_at"),
        Index("ix_infrastructure_signals_pool_created", "ip_pool_id", "created_at"),
        Index("ix_infrastructure_signals_domain_created", "domain_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), index=True
    )
    domain_id: Mapped[int | None] = mapped_column(ForeignKey("domains.id", ondelete="SET NULL"))
    domain: Mapped[str | None] = mapped_column(String(255))  # the sending domain's name
    ip_pool_id: Mapped[int | None] = mapped_column(
        ForeignKey("ip_pools.id", ondelete="SET NULL"))
    source_address: Mapped[str | None] = mapped_column(String(39))
    blames: Mapped[str] = mapped_column(String(8), nullable=False)  # ip, domain
    reason: Mapped[str] = mapped_column(String(32), nullable=False)
    origin: Mapped[str] = mapped_column(String(16), nullable=False)  # delivery, bounce
    receiver: Mapped[str | None] = mapped_column(String(255))
    code: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str | None] = mapped_column(String(16))
    text: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, index=True,
                                                 nullable=False)
