"""The per-server suppression list: recipients the service will not send to.

A suppression is active while ``expires_at`` is empty or in the future. Hard failures (and the
bounce handler) add entries that expire after SUPPRESSION_EXPIRY_DAYS; entries added by hand
never expire unless ``days`` is given. Addresses are compared lower-cased.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Iterable

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.engine import upsert
from chalicelib.db.models import Suppression
from chalicelib.services import mime

SOURCES = ("manual", "hard_fail", "bounce", "complaint", "api")


def normalize(address: str) -> str:
    return (address or "").strip().lower()


def _active():
    return or_(Suppression.expires_at.is_(None), Suppression.expires_at > clock.now())


def active_entry(db: Session, server_id: int, address: str) -> Suppression | None:
    return db.scalar(select(Suppression).where(Suppression.server_id == server_id,
                                               Suppression.address == normalize(address),
                                               _active()))


def is_suppressed(db: Session, server_id: int, address: str) -> bool:
    return active_entry(db, server_id, address) is not None


def suppressed_among(db: Session, server_id: int, addresses: Iterable[str]) -> set[str]:
    """The lower-cased addresses of ``addresses`` that are actively suppressed (one query)."""
    wanted = {normalize(a) for a in addresses}
    if not wanted:
        return set()
    rows = db.scalars(select(Suppression.address).where(Suppression.server_id == server_id,
                                                        Suppression.address.in_(wanted),
                                                        _active()))
    return set(rows)


def suppress(db: Session, server_id: int, address: str, reason: str | None, source: str,
             days: int | None = None) -> Suppression:
    """Add (or refresh) a suppression. ``days``: lifetime; None means SUPPRESSION_EXPIRY_DAYS
    for automatic sources and no expiry for manual ones. Returns the row (flushed)."""
    address = normalize(address)
    if days is None and source not in ("manual", "api"):
        days = get_settings().suppression_expiry_days
    expires_at = clock.now() + timedelta(days=days) if days else None
    # One atomic upsert: two messages to the same address failing at the same moment must
    # both record their outcome, not have one abort on the unique (server_id, address) key.
    values = {"reason": reason, "source": source, "created_at": clock.now(),
              "expires_at": expires_at}
    db.execute(upsert(db, Suppression)
               .values(server_id=server_id, address=address, **values)
               .on_conflict_do_update(index_elements=["server_id", "address"], set_=values))
    row = db.scalar(select(Suppression).where(Suppression.server_id == server_id,
                                              Suppression.address == address)
                    .execution_options(populate_existing=True))
    return row


def validate_address(address: object, field: str = "address") -> str:
    try:
        return normalize(mime.parse_address(address, field).email)
    except mime.InvalidField as exc:
        raise errors.ValidationError(f"{exc.field} {exc.message}", field=exc.field) from None


def find(db: Session, server_id: int, address: str) -> Suppression:
    row = active_entry(db, server_id, address)
    if row is None:
        raise errors.NotFound(f"{address!r} is not on the suppression list")
    return row


def remove(db: Session, server_id: int, address: str) -> Suppression:
    row = db.scalar(select(Suppression).where(Suppression.server_id == server_id,
                                              Suppression.address == normalize(address)))
    if row is None:
        raise errors.NotFound(f"{address!r} is not on the suppression list")
    db.delete(row)
    db.flush()
    return row


def list_stmt(server_id: int, query: str | None = None, include_expired: bool = False):
    stmt = select(Suppression).where(Suppression.server_id == server_id)
    if not include_expired:
        stmt = stmt.where(_active())
    if query:
        stmt = stmt.where(Suppression.address.contains(normalize(query), autoescape=True))
    return stmt.order_by(Suppression.id.desc())
