"""Content retention: each server keeps its messages' content (the raw source, the signed
copy) for ``content_retention_days`` (at most ``message_retention_days``, the record's). The
hourly retention run (workers/retention.py, through ``retention.prune``) erases the content of
older messages in bounded batches through ``services.content.erase``; the message rows, their
status, events, attempts and the statistics stay until the record's own retention deletes
them. Reads of erased content answer ContentExpired.

A message with work still pending (due for delivery or for its route's endpoint) is never
erased, so no retry ever finds its content gone: a long retry schedule or a far send_at only
delays its erasure (no lower bound on content_retention_days is needed). Retrying or
releasing a Held or HardFail message after its content expired is refused (ContentExpired);
the bulk actions skip such messages. Rows are locked while they are picked (FOR UPDATE SKIP
LOCKED on PostgreSQL), so a tenant's retry racing with the run either requeues the message
first (it is then pending and left alone) or finds it erased.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import statuses
from chalicelib.db.models import Message, Server
from chalicelib.services import content

PENDING_STATUSES = statuses.DELIVERABLE + statuses.INBOUND_DUE


def expire(db: Session, now: datetime, batch: int) -> int:
    """Erase the content of up to ``batch`` messages per distinct setting whose server's
    content retention has passed; returns how many were erased."""
    erased = 0
    for days in db.scalars(select(Server.content_retention_days).distinct()):
        servers = select(Server.id).where(Server.content_retention_days == days)
        stmt = (select(Message.id)
                .where(Message.server_id.in_(servers),
                       Message.created_at < now - timedelta(days=days),
                       Message.content_expired_at.is_(None),
                       Message.status.not_in(PENDING_STATUSES))
                .limit(batch))
        if db.get_bind().dialect.name == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        erased += content.erase(db, list(db.scalars(stmt)))
    return erased
