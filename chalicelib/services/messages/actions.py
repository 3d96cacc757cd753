"""What a tenant may do to outgoing messages after the fact: send again, release, cancel.

A message is Held when its recipient was suppressed, when its server was in Development
mode, when it was over a send limit with action hold, or when a worker died after handing it
to the remote server and its fate is unknown (see services/delivery/attempt.py); it is HardFail when
rejected or out of retries. ``retry`` (one message, POST /messages/{id}/retry) and the bulk
``release``/``retry`` actions put such messages back in the queue as fresh deliveries: the
decision to risk a duplicate is the tenant's. ``cancel`` stops a Scheduled or Pending
message that no worker has attempted (status Cancelled, event MessageCancelled in its
history); nothing is sent.

Every change is one conditional UPDATE per previous status (``transition``): a message a
worker claimed meanwhile, or one that changed status, is left alone, so a single action and
a bulk job racing with the delivery worker (or each other) act at most once.
"""
from __future__ import annotations

import uuid
from collections import Counter

from sqlalchemy import exists, insert, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors, queues, statuses
from chalicelib.db import counters
from chalicelib.db.models import Delivery, Message, MessageEvent, Server
from chalicelib.db import claims
from chalicelib.services import content

RETRYABLE = statuses.RETRYABLE
CANCELLABLE = statuses.CANCELLABLE
# The statuses each bulk action applies to.
ACTION_STATUSES = {"release": (statuses.HELD,), "retry": (statuses.HARD_FAIL,),
                   "cancel": CANCELLABLE}
DEVELOPMENT = ("the server is in Development mode, where nothing is delivered; switch it to "
               "Live first")


def transition(db: Session, server_id: int, ids: list[int], from_statuses: tuple[str, ...],
               values: dict, *conditions) -> list[int]:
    """Move the messages ``ids`` of the server that are in one of ``from_statuses`` (and meet
    ``conditions``) to ``values``, counting the change in the statistics; returns the ids
    that moved. Messages claimed by a live worker are never touched."""
    if not ids:
        return []
    moved: list[int] = []
    deltas: Counter = Counter()
    now = clock.now()
    for status in from_statuses:
        rows = db.execute(
            update(Message)
            .where(Message.id.in_(ids), Message.server_id == server_id,
                   Message.scope == "outgoing", Message.status == status,
                   claims.unclaimed(Message), *conditions)
            .values(**values, updated_at=now, locked_by=None, locked_at=None)
            .returning(Message.id, Message.held, Message.bounce, Message.stream_id,
                       Message.tag, Message.created_at)
            .execution_options(synchronize_session=False)).all()
        for row in rows:
            before = ("outgoing", status, row.bounce, status == statuses.HELD, row.stream_id,
                      row.tag, row.created_at)
            after = ("outgoing", values.get("status", status), row.bounce, row.held,
                     row.stream_id, row.tag, row.created_at)
            counters.message_change(server_id, before, after, deltas)
            moved.append(row.id)
    counters.apply(db.connection(), deltas)
    return moved


def requeue(db: Session, server_id: int, ids: list[int], from_statuses: tuple[str, ...],
            reason: str) -> list[int]:
    """Held/HardFail -> Pending, due now, woken after the commit."""
    moved = transition(db, server_id, ids, from_statuses, {
        "status": statuses.PENDING, "held": False, "status_details": reason, "attempts": 0,
        "next_attempt_at": clock.now()},
        # Its content is gone: nothing to send (retry refuses it with ContentExpired).
        Message.content_expired_at.is_(None))
    if moved:
        from chalicelib.db import after_commit

        after_commit(db, lambda: queues.enqueue_many(queues.DELIVERIES, moved))
    return moved


def not_attempted():
    """No worker has attempted the message (an InFlight marker counts as an attempt)."""
    return ~exists().where(Delivery.message_id == Message.id)


def cancel_ids(db: Session, server_id: int, ids: list[int], reason: str) -> list[int]:
    moved = transition(db, server_id, ids, CANCELLABLE, {
        "status": statuses.CANCELLED, "status_details": reason, "next_attempt_at": None},
        Message.attempts == 0, not_attempted())
    if moved:
        now = clock.now()
        rows = [{"message_id": i, "server_id": server_id, "event": "MessageCancelled",
                 "uuid": str(uuid.uuid4()), "details": reason, "created_at": now}
                for i in moved]
        for start in range(0, len(rows), 100):  # multi-row VALUES: one round trip per 100
            db.execute(insert(MessageEvent).values(rows[start:start + 100]))
    return moved


def _check_outgoing(message: Message, what: str) -> None:
    if message.scope != "outgoing":
        raise errors.ValidationError(f"only outgoing messages can be {what} here; "
                                     "use POST /inbound/{id}/retry for incoming mail")


def _reload(db: Session, message: Message) -> Message:
    db.expire(message)
    db.refresh(message)
    return message


def retry(db: Session, message: Message) -> Message:
    _check_outgoing(message, "retried")
    if content.is_expired(message):
        raise errors.ContentExpired(f"message {message.id} cannot be retried: its content "
                                    "has expired (erased by content retention or a data "
                                    "removal)")
    if message.status not in RETRYABLE:
        raise errors.ValidationError(
            f"message {message.id} is {message.status}; only {' or '.join(RETRYABLE)} "
            "messages can be retried", field="status")
    server = db.get(Server, message.server_id)
    if server.mode == "Development":
        raise errors.ValidationError(f"message {message.id} cannot be sent: {DEVELOPMENT}",
                                     field="status")
    if not requeue(db, message.server_id, [message.id], (message.status,),
                   f"requeued by the tenant (was {message.status})"):
        raise errors.ValidationError(f"message {message.id} changed meanwhile; reload it",
                                     field="status")
    return _reload(db, message)


def cancel(db: Session, message: Message) -> Message:
    """Cancel one message that has not been attempted; a 422 says why otherwise."""
    _check_outgoing(message, "cancelled")
    if message.status not in CANCELLABLE:
        raise errors.ValidationError(
            f"message {message.id} is {message.status}; only Scheduled or Pending messages "
            "that have not been attempted can be cancelled", field="status")
    if not cancel_ids(db, message.server_id, [message.id], "cancelled by the tenant"):
        raise errors.ValidationError(
            f"message {message.id} is being delivered or has already been attempted; it can "
            "no longer be cancelled", field="status")
    return _reload(db, message)
