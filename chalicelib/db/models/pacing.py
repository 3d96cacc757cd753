"""Per-destination pacing (services/delivery/pacing.py): the shared state of each destination
every delivery worker reads and writes, and the connection slots workers hold on it.

Instance-wide rows, not a tenant's data: a destination is a receiving mail system (a
recipient domain, or a group of them such as every domain Google hosts) as seen from one IP
pool, whatever server's mail goes there.
"""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime

from sqlalchemy import DateTime, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base


class DeliveryDestination(Base):
    """One destination as seen from one IP pool (``ip_pool_id`` 0: no pool)."""

    __tablename__ = "delivery_destinations"

    ip_pool_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    destination: Mapped[str] = mapped_column(String(255), primary_key=True)
    # After a throttle reply (421, 4.7.x) no worker connects before this; ``throttles`` counts
    # consecutive throttle replies (each doubles the next backoff; a delivery resets it).
    backoff_until: Mapped[datetime | None] = mapped_column(DateTime())
    backoff_reason: Mapped[str | None] = mapped_column(Text)
    throttles: Mapped[int] = mapped_column(Integer, default=0, server_default="0",
                                           nullable=False)
    # Messages a minute: the generic cell rate algorithm's theoretical arrival time (epoch
    # seconds); and the last wake-up time handed to a message that waits (epoch seconds), so
    # waiting messages come back one by one instead of all at once.
    tat: Mapped[float] = mapped_column(Float, default=0.0, server_default="0", nullable=False)
    wake_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0",
                                           nullable=False)
    # Connections open now (the rows of delivery_leases, counted here so a slot is taken
    # with one conditional UPDATE).
    active: Mapped[int] = mapped_column(Integer, default=0, server_default="0", nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class DeliveryLease(Base):
    """A connection slot a worker holds on a destination; it lapses at ``expires_at`` (a
    worker that died), and a lapsed one is given back when the destination runs out."""

    __tablename__ = "delivery_leases"

    ip_pool_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    destination: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
