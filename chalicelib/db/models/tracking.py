"""Open and click tracking: rewritten links and the events recorded against them."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, DateTime, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base, BigId


class TrackedLink(Base):
    __tablename__ = "tracked_links"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True, nullable=False
    )
    token: Mapped[str] = mapped_column(String(32), unique=True, nullable=False)
    url: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


# Events carry the message's stream and tag (copied when recorded), so counting them per
# stream and tag (stats edges, counter rebuilds) needs no join back to messages.
class OpenEvent(Base):
    __tablename__ = "open_events"
    __table_args__ = (Index("ix_open_events_server_created", "server_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True, nullable=False
    )
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"), nullable=False)
    ip_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    likely_machine: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    # why it looks automated (or which proxy fetched it): apple_mpp, google_proxy, scanner ...
    detection: Mapped[str | None] = mapped_column(String(32))
    first: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)  # the message's first
    stream_id: Mapped[int | None] = mapped_column(ForeignKey("streams.id", ondelete="SET NULL"))
    tag: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class ClickEvent(Base):
    __tablename__ = "click_events"
    __table_args__ = (Index("ix_click_events_server_created", "server_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True, nullable=False
    )
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"), nullable=False)
    link_id: Mapped[int] = mapped_column(ForeignKey("tracked_links.id", ondelete="CASCADE"), nullable=False)
    url: Mapped[str] = mapped_column(Text, nullable=False)
    ip_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    likely_machine: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    # why it looks automated (or which proxy fetched it): apple_mpp, google_proxy, scanner ...
    detection: Mapped[str | None] = mapped_column(String(32))
    first: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)  # the message's first
    stream_id: Mapped[int | None] = mapped_column(ForeignKey("streams.id", ondelete="SET NULL"))
    tag: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class StatCounter(Base):
    """Rolled-up statistics (chalicelib/db/counters.py keeps them in step with the rows, in the
    same transaction). ``period`` "day" holds message/open/click metrics per dimension ("" all,
    "s:<stream id>" per stream, 0 for none, "t:<tag>" per tag); "hour" holds delivery outcome
    events ("event:MessageSent"...) and the open/click metrics, for the whole server (dim "")."""

    __tablename__ = "stat_counters"
    __table_args__ = (UniqueConstraint("server_id", "period", "bucket", "metric", "dim",
                                       name="uq_stat_counters_key"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"), nullable=False)
    period: Mapped[str] = mapped_column(String(4), nullable=False)
    bucket: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    metric: Mapped[str] = mapped_column(String(40), nullable=False)
    dim: Mapped[str] = mapped_column(String(300), nullable=False)
    count: Mapped[int] = mapped_column(BigInteger, default=0, nullable=False)
