"""Inbound routes: which incoming addresses are accepted and where their mail goes."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib.db.base import Base, Timestamps, uuid_column


class Route(Timestamps, Base):
    __tablename__ = "routes"
    __table_args__ = (UniqueConstraint("domain_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = uuid_column()
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    domain_id: Mapped[int] = mapped_column(
        ForeignKey("domains.id", ondelete="CASCADE"), index=True, nullable=False
    )
    name: Mapped[str] = mapped_column(String(255), nullable=False)  # local part, or "*"
    mode: Mapped[str] = mapped_column(String(16), nullable=False)  # endpoint, accept, hold, bounce, reject
    # {"type": "http", "url": ..., "format": "json"|"raw"} | {"type": "smtp", "host", "port", "tls"}
    # | {"type": "address", "address": ...}
    endpoint: Mapped[Any | None] = mapped_column(JSON)
