"""Infrastructure signals: refusals that say the sending IP address or the sending domain is
the problem, not the recipient or the message.

A failure's reason (``services/failures/``) names what it blames: ``ip`` (``block_list``,
``ip_reputation``, ``ptr_required``) or ``domain`` (``domain_reputation``,
``authentication``, ``sender_refused``). Each such refusal, an SMTP reply during delivery
(``origin`` delivery) or a bounce (``origin`` bounce), becomes one ``InfrastructureSignal``
row with what a person needs to act: the address the mail left from and its IP pool, the
sending domain, the receiver that said it (the MX host, or the bounce's Remote-MTA /
Reporting-MTA), when, the reply code, enhanced status and words. It is logged
(``infrastructure.signal``, WARNING) and counted (``InfrastructureSignals``) at once.

Health (``summary``): the signals of the last INFRASTRUCTURE_SIGNAL_WINDOW_HOURS of one
address, pool or domain: how many, blaming the IP or the domain, when the last came, and the
receivers that said it with their latest reply. The rows are kept
INFRASTRUCTURE_SIGNAL_RETENTION_DAYS (the retention run); a signal is about the sending
infrastructure, so a retried message may add one per attempt: each refusal counts.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from ipaddress import ip_address

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from chalicelib import clock, observability
from chalicelib.config import get_settings
from chalicelib.db import counters
from chalicelib.db.models import InfrastructureSignal, IPAddress, IPPool, Server

IP, DOMAIN = "ip", "domain"
DELIVERY, BOUNCE = "delivery", "bounce"  # origins
TOP_RECEIVERS = 5
S = InfrastructureSignal


def record(db: Session, *, server_id: int, blames: str, reason: str, origin: str,
           message_id: int | None = None, domain_id: int | None = None,
           domain: str | None = None, ip_pool_id: int | None = None,
           source_address: str | None = None, receiver: str | None = None,
           code: int | None = None, status: str | None = None,
           text: str | None = None) -> InfrastructureSignal:
    """Write one signal in the caller's transaction, log and count it."""
    row = InfrastructureSignal(
        server_id=server_id, message_id=message_id, domain_id=domain_id,
        domain=(domain or None) and domain[:255], ip_pool_id=ip_pool_id,
        source_address=(source_address or None) and source_address[:39], blames=blames,
        reason=reason, origin=origin, receiver=(receiver or None) and receiver[:255],
        code=code, status=(status or None) and status[:16],
        text=(text or None) and text[:1000], created_at=clock.now())
    db.add(row)
    db.flush()
    observability.count("infrastructure_signals")
    observability.log("infrastructure.signal", "warning", signal_id=row.id, blames=blames,
                      reason=reason, origin=origin, source_address=row.source_address,
                      ip_pool_id=ip_pool_id, domain=row.domain, server_id=server_id,
                      message_id=message_id, receiver=row.receiver, code=code,
                      status=row.status, text=row.text)
    return row


def pool_of(db: Session, source_address: str | None, server_id: int) -> int | None:
    """The IP pool that lists ``source_address`` (None: none does, or no address): the
    server's own pool (or the default one) when it does, an address being in several."""
    if not source_address:
        return None
    try:
        address = str(ip_address(source_address))
    except ValueError:
        return None
    own = func.coalesce(
        select(Server.ip_pool_id).where(Server.id == server_id).scalar_subquery(),
        select(IPPool.id).where(IPPool.is_default.is_(True)).order_by(IPPool.id).limit(1)
        .scalar_subquery())
    return db.scalar(select(IPAddress.ip_pool_id)
                     .where(or_(IPAddress.ipv4 == address, IPAddress.ipv6 == address))
                     .order_by((IPAddress.ip_pool_id == own).desc(), IPAddress.id).limit(1))


def window_start(now: datetime | None = None) -> datetime:
    return (now or clock.now()) - timedelta(
        hours=get_settings().infrastructure_signal_window_hours)


def for_address(*addresses: str | None):
    """The condition of an address's signals (its IPv4 and IPv6 forms)."""
    wanted = [a for a in addresses if a]
    return S.source_address.in_(wanted) if wanted else S.id.is_(None)


def for_pool(pool_id: int):
    return S.ip_pool_id == pool_id


def for_domain(domain_id: int):
    return S.domain_id == domain_id


def summary(db: Session, condition) -> dict:
    """The health of one address, pool or domain (``condition``: ``for_address`` ...): its
    signals of the window, by what they blame and by receiver (the most frequent first, each
    with its latest refusal)."""
    since = window_start()
    where = (condition, S.created_at >= since)
    totals = {IP: 0, DOMAIN: 0}
    receivers: dict[str | None, dict] = {}
    for receiver, blames, n, last in db.execute(
            select(S.receiver, S.blames, func.count(), func.max(S.created_at))
            .where(*where).group_by(S.receiver, S.blames)):
        totals[blames] = totals.get(blames, 0) + n
        entry = receivers.setdefault(receiver, {"count": 0, "last_at": None})
        entry["count"] += n
        last = counters.as_datetime(last)
        entry["last_at"] = max(filter(None, (entry["last_at"], last)))
    # the most frequent first; among as frequent, the latest first
    top = sorted(receivers.items(), key=lambda kv: (-kv[1]["count"],
                                                    -kv[1]["last_at"].timestamp()))
    top = top[:TOP_RECEIVERS]
    listed = []
    for receiver, entry in top:
        latest = db.scalar(select(S).where(
            *where, S.receiver == receiver if receiver is not None else S.receiver.is_(None))
            .order_by(S.id.desc()).limit(1))
        listed.append({"receiver": receiver, "count": entry["count"],
                       "last_at": entry["last_at"], "latest": latest})
    last_at = max((e["last_at"] for e in receivers.values()), default=None)
    return {"window_hours": get_settings().infrastructure_signal_window_hours, "since": since,
            "count": sum(totals.values()), "ip": totals.get(IP, 0),
            "domain": totals.get(DOMAIN, 0), "last_at": last_at, "receivers": listed}


def list_stmt(*, server_id: int | None = None, domain_id: int | None = None,
              source_address: str | None = None, ip_pool_id: int | None = None,
              blames: str | None = None, since: datetime | None = None):
    """Signals, newest first, narrowed by what is given."""
    stmt = select(S)
    for column, value in ((S.server_id, server_id), (S.domain_id, domain_id),
                          (S.source_address, source_address), (S.ip_pool_id, ip_pool_id),
                          (S.blames, blames)):
        if value is not None:
            stmt = stmt.where(column == value)
    if since is not None:
        stmt = stmt.where(S.created_at >= since)
    return stmt.order_by(S.id.desc())


def prune(db: Session, now: datetime, limit: int) -> int:
    """Delete up to ``limit`` signals older than INFRASTRUCTURE_SIGNAL_RETENTION_DAYS."""
    cutoff = now - timedelta(days=get_settings().infrastructure_signal_retention_days)
    ids = list(db.scalars(select(S.id).where(S.created_at < cutoff).limit(limit)))
    if not ids:
        return 0
    return db.execute(delete(S).where(S.id.in_(ids))
                      .execution_options(synchronize_session=False)).rowcount
