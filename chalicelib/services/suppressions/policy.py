"""The suppression policy: what a final failure to deliver does to its recipient, decided in
one place for an SMTP reply during delivery (``services/delivery/steps.decide`` ->
``attempt.record``) and for a bounce (``services/inbound/bounces.receive``). It follows the
failure's reason (``services/failures/``), not the digit of its code:

- a permanent failure whose reason says the address is bad (no such user, no such domain,
  the mailbox moved, the domain accepts no mail) suppresses the recipient at once
  (``HardBounce``, for SUPPRESSION_EXPIRY_DAYS);
- a mailbox full or disabled, a relay that gave up (expired), and address-level wording in a
  temporary (4.x.x) report, suppress only when repeated: SUPPRESSION_REPEAT_FAILURES failures
  spanning at least SUPPRESSION_REPEAT_DAYS days, none more than that many days after the one
  before (a longer quiet spell starts the count again). The count lives in
  ``recipient_failures``, one row per server and address, deleted when the address is
  suppressed (and by the retention sweep once stale);
- everything about the sender, the IP, the content or the moment (reputation, block lists,
  spam, virus, authentication, reverse DNS, policy, size, rate limits, network, unknown)
  never suppresses the recipient.

A delivery accepted in between does not reset the count (no write on every delivery for it);
the quiet-spell rule and the span keep a mailbox that was full once from being suppressed.
"""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import case, delete, select
from sqlalchemy.orm import Session

from chalicelib import clock
from chalicelib.config import get_settings
from chalicelib.db.engine import upsert
from chalicelib.db.models import RecipientFailure, Suppression
from chalicelib.services.failures import AFTER_REPEATS, AT_ONCE, Verdict
from chalicelib.services.suppressions import entries


def after_failure(db: Session, server_id: int, address: str, verdict: Verdict, *, origin: str,
                  details: str, message_id: int | None = None) -> Suppression | None:
    """Apply the policy to one final failure of ``address`` (a HardFail or a failed DSN);
    returns the suppression it added, or None. ``origin``: ``hard_fail`` or ``bounce``."""
    how = verdict.suppression
    if how == AT_ONCE:
        return _suppress(db, server_id, address, verdict.reason, origin, details, message_id)
    if how != AFTER_REPEATS:
        return None
    failures, first, last = _count(db, server_id, address, verdict.reason)
    settings = get_settings()
    span = last - first
    if failures < settings.suppression_repeat_failures or \
            span < timedelta(days=settings.suppression_repeat_days):
        return None
    days = span.days
    note = (f"{failures} failures over {days} day{'s' if days != 1 else ''} "
            f"(last: {verdict.reason}): {details}")
    return _suppress(db, server_id, address, verdict.reason, origin, note, message_id)


def _suppress(db: Session, server_id: int, address: str, reason: str, origin: str,
              details: str, message_id: int | None) -> Suppression:
    db.execute(delete(RecipientFailure).where(
        RecipientFailure.server_id == server_id,
        RecipientFailure.address == entries.normalize(address))
        .execution_options(synchronize_session=False))
    return entries.suppress(db, server_id, address, reason="HardBounce", origin=origin,
                            details=details[:1000], bounce_reason=reason,
                            message_id=message_id)


def _count(db: Session, server_id: int, address: str, reason: str):
    """Count one more failure (one atomic upsert: two failures of the same address at the
    same moment both count); returns (failures, first_failed_at, last_failed_at)."""
    now = clock.now()
    address = entries.normalize(address)
    quiet = now - timedelta(days=get_settings().suppression_repeat_days)
    table = RecipientFailure.__table__
    stmt = upsert(db, table).values(server_id=server_id, address=address, reason=reason,
                                    failures=1, first_failed_at=now, last_failed_at=now)
    stale = table.c.last_failed_at < quiet
    stmt = stmt.on_conflict_do_update(
        index_elements=["server_id", "address"],
        set_={"failures": case((stale, 1), else_=table.c.failures + 1),
              "first_failed_at": case((stale, now), else_=table.c.first_failed_at),
              "last_failed_at": now, "reason": reason})
    db.execute(stmt)
    return db.execute(select(RecipientFailure.failures, RecipientFailure.first_failed_at,
                             RecipientFailure.last_failed_at)
                      .where(RecipientFailure.server_id == server_id,
                             RecipientFailure.address == address)).one()


def pending_failures(db: Session, server_id: int, address: str) -> RecipientFailure | None:
    """The address's counted failures that have not suppressed it (yet), or None."""
    return db.scalar(select(RecipientFailure).where(
        RecipientFailure.server_id == server_id,
        RecipientFailure.address == entries.normalize(address)))
