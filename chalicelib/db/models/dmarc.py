"""DMARC aggregate reports (RFC 7489 ``rua``) received for a sending domain, and their rows.

Each table carries ``organization_id`` and ``server_id`` directly (row-level security keys on
them) besides ``domain_id``; a report and its rows go with their domain (ON DELETE CASCADE).
"""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime
from typing import Any

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, ForeignKey, Index, String,
                        UniqueConstraint)
from sqlalchemy.orm import Mapped, mapped_column

from chalicelib import clock
from chalicelib.db.base import Base, BigId


class _OfADomain:
    """The tenant keys (row-level security reads the first two) and the domain."""

    organization_id: Mapped[int] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True, nullable=False)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False)
    domain_id: Mapped[int] = mapped_column(
        ForeignKey("domains.id", ondelete="CASCADE"), nullable=False)


class DmarcReport(_OfADomain, Base):
    """One aggregate report: who sent it, for which period, the policy it saw published."""

    __tablename__ = "dmarc_reports"
    # A reporter may send the same report again (a retry after a lost 250): stored once.
    __table_args__ = (
        UniqueConstraint("domain_id", "reporter", "report_id", name="uq_dmarc_reports_report"),
        Index("ix_dmarc_reports_domain_begin", "domain_id", "begin_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reporter: Mapped[str] = mapped_column(String(255), nullable=False)  # org_name
    reporter_email: Mapped[str | None] = mapped_column(String(255))
    extra_contact: Mapped[str | None] = mapped_column(String(255))
    report_id: Mapped[str] = mapped_column(String(255), nullable=False)
    begin_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    end_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    # policy_published: domain, adkim, aspf, p, sp, pct, np, fo as the reporter saw them
    policy: Mapped[Any] = mapped_column(JSON, nullable=False)
    errors: Mapped[Any | None] = mapped_column(JSON)  # report_metadata/error, when any
    attachment: Mapped[str] = mapped_column(String(8), nullable=False)  # xml, gzip, zip
    mail_from: Mapped[str | None] = mapped_column(String(255))
    messages: Mapped[int] = mapped_column(BigInteger, nullable=False)  # sum of the rows' counts
    passed: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False,
                                                 index=True)


class DmarcRecord(_OfADomain, Base):
    """One ``<record>`` of a report: a source address, how many messages it sent with one set
    of identifiers and results, and what the receiver did with them."""

    __tablename__ = "dmarc_records"
    __table_args__ = (
        Index("ix_dmarc_records_domain_begin", "domain_id", "begin_at"),
        Index("ix_dmarc_records_domain_source", "domain_id", "source_ip"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    report_id: Mapped[int] = mapped_column(
        ForeignKey("dmarc_reports.id", ondelete="CASCADE"), index=True, nullable=False)
    # The report's period and reporter, copied: rows are filtered and grouped without a join.
    begin_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    reporter: Mapped[str] = mapped_column(String(255), nullable=False)
    source_ip: Mapped[str] = mapped_column(String(45), nullable=False)
    count: Mapped[int] = mapped_column(BigInteger, nullable=False)
    disposition: Mapped[str] = mapped_column(String(16), nullable=False)  # none/quarantine/reject
    # policy_evaluated: SPF / DKIM passed AND aligned with the From domain ("pass" / "fail")
    spf_aligned: Mapped[bool] = mapped_column(Boolean, nullable=False)
    dkim_aligned: Mapped[bool] = mapped_column(Boolean, nullable=False)
    passed: Mapped[bool] = mapped_column(Boolean, nullable=False)  # DMARC: either aligned
    # auth_results: the raw SPF result and the best DKIM result, whatever the alignment
    spf_result: Mapped[str | None] = mapped_column(String(16))
    spf_domain: Mapped[str | None] = mapped_column(String(255))
    dkim_result: Mapped[str | None] = mapped_column(String(16))
    dkim_domain: Mapped[str | None] = mapped_column(String(255))
    dkim_selector: Mapped[str | None] = mapped_column(String(63))
    header_from: Mapped[str | None] = mapped_column(String(255))
    envelope_from: Mapped[str | None] = mapped_column(String(255))
    envelope_to: Mapped[str | None] = mapped_column(String(255))
    # policy overrides (forwarded, mailing_list ...) and every auth result as reported
    reasons: Mapped[Any | None] = mapped_column(JSON)
    auth_results: Mapped[Any] = mapped_column(JSON, nullable=False)
