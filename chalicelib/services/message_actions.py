"""What a tenant may do to one outgoing message after the fact: send it again.

A message is Held when its recipient was suppressed, or when a worker died after handing it
to the remote server and its fate is unknown (see workers/delivery.py); it is HardFail when
rejected or out of retries. ``retry`` puts it back in the queue as a fresh delivery: the
decision to risk a duplicate is the tenant's. A recipient still on the suppression list is
held again by the worker, so remove the suppression first.
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from chalicelib import clock, errors, queues
from chalicelib.db.models import Message

RETRYABLE = ("Held", "HardFail")


def retry(db: Session, message: Message) -> Message:
    if message.scope != "outgoing":
        raise errors.ValidationError("only outgoing messages can be retried here; "
                                     "use POST /inbound/{id}/retry for incoming mail")
    if message.status not in RETRYABLE:
        raise errors.ValidationError(
            f"message {message.id} is {message.status}; only {' or '.join(RETRYABLE)} "
            "messages can be retried", field="status")
    previous = message.status
    message.status = "Pending"
    message.held = False
    message.status_details = f"requeued by the tenant (was {previous})"
    message.attempts = 0
    message.next_attempt_at = clock.now()
    message.locked_by = message.locked_at = None
    db.flush()
    queues.enqueue_after_commit(db, "deliveries", message.id)
    return message
