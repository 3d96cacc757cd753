"""The MTA-STS policies of recipient domains (RFC 8461), cached for every worker."""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base


class MtaStsPolicy(Base):
    """The last policy fetched for a recipient domain (services/delivery/mta_sts.py), kept
    until ``expires_at`` (its max_age) and replaced when the domain's ``_mta-sts`` TXT id
    changes. Public data about other people's domains: no tenant column."""

    __tablename__ = "mta_sts_policies"

    domain: Mapped[str] = mapped_column(String(253), primary_key=True)
    policy_id: Mapped[str] = mapped_column(String(32), nullable=False)  # the TXT record's id
    mode: Mapped[str] = mapped_column(String(8), nullable=False)  # enforce, testing, none
    mx: Mapped[str] = mapped_column(Text, nullable=False)  # the mx patterns, one per line
    max_age: Mapped[int] = mapped_column(Integer, nullable=False)
    fetched_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
