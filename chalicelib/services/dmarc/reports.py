"""What is shown of a domain's reports: the reports, their rows, a summary per source
address and the pass rate per UTC day, over a range (default: the last 30 days).

A report and its rows belong to the range when the report's period begins in
``[from, to)``; the day buckets are the UTC days those periods begin on (receivers report
per UTC day). A row "passes" DMARC when SPF or DKIM passed aligned with the From domain (the
receiver's ``policy_evaluated``).

A source is ours when its address is in an IP pool, is the relay's (DELIVERY_RELAY, its
A/AAAA records looked up and kept five minutes) or lies in DMARC_KNOWN_SOURCES; the answer
names which. A failing source that is ours is a configuration problem to fix (DKIM not
published, the return path not set up); one that is not ours is a sender the tenant forgot,
or somebody spoofing the domain.
"""
from __future__ import annotations

import ipaddress
import time
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, case, cast, func, select
from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.config import get_settings
from chalicelib.db.models import DmarcRecord, DmarcReport, Domain, IPAddress, IPPool
from chalicelib.services.dmarc import addresses
from chalicelib.services.tracking.stats import resolve_range  # noqa: F401  (the same default range)
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import management as shape

MAX_DAYS = 1000
RESULTS = ("pass", "fail")
_RELAY_CACHE_SECONDS = 300.0
_relay_cache: dict[str, tuple[float, list[str]]] = {}


# --- ours or not ----------------------------------------------------------------------------

def _relay_addresses(host: str) -> list[str]:
    """The relay's addresses: itself when it is one, else its A and AAAA records."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    cached = _relay_cache.get(host)
    if cached is not None and time.monotonic() - cached[0] < _RELAY_CACHE_SECONDS:
        return cached[1]
    from chalicelib import dns_lookup  # dnspython: not at cold start

    found: list[str] = []
    for rdtype in ("A", "AAAA"):
        try:
            found += [r.address for r in dns_lookup.resolve(host, rdtype)]
        except dns_lookup.FAILED:
            continue
    _relay_cache[host] = (time.monotonic(), found)
    return found


def own_networks(db: Session) -> list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]]:
    """(network, what it is) of every sending address of ours."""
    networks = []
    for ipv4, ipv6, pool in db.execute(select(IPAddress.ipv4, IPAddress.ipv6, IPPool.name)
                                       .join(IPPool, IPPool.id == IPAddress.ip_pool_id)):
        for value in (ipv4, ipv6):
            if value:
                networks.append((ipaddress.ip_network(value), f"IP pool {pool}"))
    relay = get_settings().delivery_relay.strip()
    if relay and relay.lower() not in ("mx", "capture"):
        from chalicelib.services.delivery.client import parse_relay

        host = parse_relay(relay)[0]
        networks += [(ipaddress.ip_network(a), f"relay {host}") for a in _relay_addresses(host)]
    for value in filter(None, get_settings().dmarc_known_sources.split(",")):
        networks.append((ipaddress.ip_network(value), "DMARC_KNOWN_SOURCES"))
    return networks


def known_as(networks, source_ip: str) -> str | None:
    """What the source is when it is ours, else None."""
    try:
        address = ipaddress.ip_address(source_ip)
    except ValueError:
        return None
    for network, label in networks:
        if address.version == network.version and address in network:
            return label
    return None


# --- queries ----------------------------------------------------------------------------------

def reports_stmt(domain_id: int, start: datetime, end: datetime):
    return select(DmarcReport).where(
        DmarcReport.domain_id == domain_id, DmarcReport.begin_at >= start,
        DmarcReport.begin_at < end).order_by(DmarcReport.begin_at.desc(), DmarcReport.id.desc())


def find_report(db: Session, domain_id: int, report_id: int) -> DmarcReport:
    report = db.get(DmarcReport, report_id)
    if report is None or report.domain_id != domain_id:
        raise errors.NotFound(f"no DMARC report {report_id} for this domain")
    return report


def _record_filters(domain_id: int, start: datetime, end: datetime, result: str | None) -> list:
    where = [DmarcRecord.domain_id == domain_id, DmarcRecord.begin_at >= start,
             DmarcRecord.begin_at < end]
    if result is not None:
        where.append(DmarcRecord.passed.is_(result == "pass"))
    return where


def records_stmt(domain_id: int, start: datetime, end: datetime, *, result: str | None = None,
                 source_ip: str | None = None, report_id: int | None = None):
    where = _record_filters(domain_id, start, end, result)
    if source_ip is not None:
        where.append(DmarcRecord.source_ip == source_ip)
    if report_id is not None:
        where.append(DmarcRecord.report_id == report_id)
    return select(DmarcRecord).where(*where).order_by(DmarcRecord.begin_at.desc(),
                                                       DmarcRecord.id)


def _sum_if(condition):
    return cast(func.sum(case((condition, DmarcRecord.count), else_=0)), BigInteger)


def sources(db: Session, domain_id: int, start: datetime, end: datetime, *,
            result: str | None = None, page: int = 1,
            per_page: int = 25) -> tuple[list[dict], dict]:
    """One entry per source address, most messages first, with how many passed, how many
    were aligned by SPF and by DKIM, who reported it and whether it is ours."""
    where = _record_filters(domain_id, start, end, result)
    messages = cast(func.sum(DmarcRecord.count), BigInteger)
    total = db.scalar(select(func.count(func.distinct(DmarcRecord.source_ip))).where(*where)) or 0
    rows = db.execute(
        select(DmarcRecord.source_ip, messages, _sum_if(DmarcRecord.passed),
               _sum_if(DmarcRecord.spf_aligned), _sum_if(DmarcRecord.dkim_aligned),
               func.min(DmarcRecord.begin_at), func.max(DmarcRecord.begin_at))
        .where(*where).group_by(DmarcRecord.source_ip)
        .order_by(messages.desc(), DmarcRecord.source_ip)
        .limit(per_page).offset((page - 1) * per_page)).all()
    reporters: dict[str, list[str]] = {}
    for ip, reporter in db.execute(
            select(DmarcRecord.source_ip, DmarcRecord.reporter).distinct()
            .where(*where, DmarcRecord.source_ip.in_([r[0] for r in rows]))
            .order_by(DmarcRecord.reporter)):
        reporters.setdefault(ip, []).append(reporter)
    networks = own_networks(db) if rows else []
    found = [_source(networks, reporters.get(row[0], []), *row) for row in rows]
    return found, {"page": page, "per_page": per_page, "total": total,
                   "total_pages": (total + per_page - 1) // per_page}


@builds(shape.DmarcSource)
def _source(networks, reporters: list[str], ip: str, n, passed, spf, dkim, first: datetime,
            last: datetime) -> dict:
    known = known_as(networks, ip)
    return {"source_ip": ip, "ours": known is not None, "known_as": known,
            "messages": int(n), "passed": int(passed), "failed": int(n) - int(passed),
            "spf_aligned": int(spf), "dkim_aligned": int(dkim), "reporters": reporters,
            "first_seen": first, "last_seen": last}


@builds(shape.DmarcSummary)
def summary(db: Session, domain: Domain, start: datetime, end: datetime) -> dict:
    """Messages reported, passed and failed per UTC day the reports' periods begin on (every
    day of the range listed), with the totals."""
    first = start.replace(hour=0, minute=0, second=0, microsecond=0)
    if (end - first) / timedelta(days=1) > MAX_DAYS:
        raise errors.ValidationError(f"the range holds more than {MAX_DAYS} days; narrow it",
                                     field="from")
    day = func.date(DmarcRecord.begin_at)
    per_day = {}
    for value, n, passed in db.execute(
            select(day, cast(func.sum(DmarcRecord.count), BigInteger),
                   _sum_if(DmarcRecord.passed))
            .where(*_record_filters(domain.id, start, end, None)).group_by(day)):
        key = value if isinstance(value, str) else value.isoformat()
        per_day[key[:10]] = (int(n), int(passed))
    buckets, totals = [], {"messages": 0, "passed": 0, "failed": 0}
    at = first
    while at < end:
        n, passed = per_day.get(at.date().isoformat(), (0, 0))
        buckets.append({"start": at, "messages": n, "passed": passed, "failed": n - passed})
        totals["messages"] += n
        totals["passed"] += passed
        at += timedelta(days=1)
    totals["failed"] = totals["messages"] - totals["passed"]
    report_count = db.scalar(select(func.count()).select_from(
        reports_stmt(domain.id, start, end).order_by(None).subquery()))
    source_count = db.scalar(select(func.count(func.distinct(DmarcRecord.source_ip)))
                             .where(*_record_filters(domain.id, start, end, None)))
    return {"from": start, "to": end, "report_address": addresses.report_address(domain),
            "totals": {**totals, "reports": int(report_count),
                                                 "sources": int(source_count)},
            "buckets": buckets}
