"""Mail frames: a piece of mail HTML held for a short while so the console (or an API client)
can show it in a sandboxed frame from its own URL (services/mailframes/)."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base, BigId


class MailFrame(Base):
    """The HTML of one frame, built for an authorized caller when its URL was issued; served
    by its signed id until ``expires_at``. ``kind`` and ``ref`` say what it shows (a
    template's permalink, a message's id) for the logs and the reader, not for serving."""

    __tablename__ = "mail_frames"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    organization_id: Mapped[int] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True, nullable=False)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    ref: Mapped[str | None] = mapped_column(String(255))
    html: Mapped[str] = mapped_column(Text, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(), index=True, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
