"""Handing received mail to its route's endpoint through the "inbound" queue, with retries;
releasing a held message (bypass) and retrying a failed one.

Every attempt is a Delivery row on the message, so failures are visible on it; ``Retrying``
waits for the next attempt (doubling delays up to MAX_RETRY_DELAY), ``Failed`` is a permanent
refusal or attempts ran out (INBOUND_MAX_ATTEMPTS).
"""
from __future__ import annotations

import functools
import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from chalicelib import clock, errors, observability, queues, statuses
from chalicelib.config import get_settings
from chalicelib.db import after_commit, claims, session_scope, tenancy
from chalicelib.db.models import Delivery, Message, Route
from chalicelib.services import content

if TYPE_CHECKING:
    from chalicelib.services.inbound import endpoints as inbound_endpoints

log = logging.getLogger(__name__)

QUEUE = queues.INBOUND
# Not Pending/SoftFail: those are the outgoing pipeline's due statuses, and an inbound row
# must never be picked up by the delivery sweeper.
DUE_STATUSES = statuses.INBOUND_DUE
MAX_RETRY_DELAY = 6 * 3600


def _endpoint(db: Session, message: Message) -> dict | None:
    route = db.get(Route, message.route_id) if message.route_id else None
    return route.endpoint if route is not None else None


def _schedule_now(db: Session, message: Message) -> None:
    message.status = statuses.QUEUED
    message.next_attempt_at = clock.now()
    message.status_details = None
    queues.enqueue_after_commit(db, QUEUE, message.id)


def _content_kept(message: Message) -> None:
    if content.is_expired(message):
        raise errors.ContentExpired(f"message {message.id} cannot be delivered: its content "
                                    "has expired (erased by content retention or a data "
                                    "removal)")


def bypass(db: Session, message: Message) -> Message:
    """Release a held message: to its route's endpoint when it has one, else just accepted."""
    _content_kept(message)
    if not message.held:
        raise errors.ValidationError(f"message {message.id} is not held (status "
                                     f"{message.status})", field="id")
    message.held = False
    if _endpoint(db, message):
        message.attempts = 0
        _schedule_now(db, message)
    else:
        message.status = statuses.ACCEPTED
        message.status_details = "hold bypassed; the route has no endpoint to deliver to"
    return message


def retry(db: Session, message: Message) -> Message:
    """Requeue a message whose delivery failed or is waiting for its next attempt."""
    _content_kept(message)
    if message.held:
        raise errors.ValidationError(f"message {message.id} is held; bypass it to deliver it",
                                     field="id")
    if message.status not in (statuses.FAILED, statuses.RETRYING, statuses.QUEUED,
                              statuses.DELIVERED):
        raise errors.ValidationError(
            f"message {message.id} has status {message.status} and nothing to retry", field="id")
    if not _endpoint(db, message):
        raise errors.ValidationError(f"the route of message {message.id} has no endpoint",
                                     field="id")
    message.attempts = 0
    message.locked_by = message.locked_at = None
    _schedule_now(db, message)
    return message


def retry_delay_seconds(failed_attempts: int) -> float:
    minutes = 2 ** max(0, failed_attempts - 1)
    return get_settings().scaled(min(60 * minutes, MAX_RETRY_DELAY))


def _wire(message: Message, route: Route | None) -> dict:
    return {"id": message.id, "token": message.token, "rcpt_to": message.rcpt_to,
            "mail_from": message.mail_from, "scope": message.scope, "bounce": message.bounce,
            "subject": message.subject, "route_id": message.route_id,
            "route": f"{route.name}" if route else None}


def process(message_id: int) -> None:
    """Worker: one wake-up for an inbound message. Claims it, delivers outside any
    transaction, then records the attempt and the new status in one short transaction."""
    # Imported here (the queue worker), not at cold start of the HTTP function.
    from chalicelib.services.inbound import endpoints as inbound_endpoints

    worker = claims.worker_id()
    with session_scope() as db:
        # The wake-up names a row, not a tenant ("inbound-claim", db/tenancy.py); once the row
        # is claimed the worker acts for its server.
        with tenancy.across_tenants(db, "inbound-claim"):
            message = db.get(Message, message_id)
            if message is None or message.scope != "incoming" or \
                    message.status not in DUE_STATUSES:
                return
            wait = (message.next_attempt_at - clock.now()).total_seconds() \
                if message.next_attempt_at else 0
            if wait > 0:  # woken early (SQS delays stop at 900 s): sleep again, nothing else
                queues.enqueue(QUEUE, message_id, min(wait, queues.SQS_MAX_DELAY))
                return
            if not claims.claim(db, Message, message_id, worker, Message.scope == "incoming",
                                Message.status.in_(DUE_STATUSES)):
                return
        server_id = message.server_id
        tenancy.act(db, tenancy.for_server(server_id))
        message = db.get(Message, message_id)
        route = db.get(Route, message.route_id) if message.route_id else None
        endpoint = route.endpoint if route else None
        wire = _wire(message, route)
        raw = content.source_bytes(db, message.submission_id)
        rp_domain = get_settings().effective_return_path_domain
    if endpoint is None:
        attempt = inbound_endpoints.Attempt(inbound_endpoints.FAILED,
                                            "the route is gone or has no endpoint")
    elif raw is None:  # erased (services/content/): nothing left to hand over
        attempt = inbound_endpoints.Attempt(inbound_endpoints.FAILED, "content expired")
    else:
        try:
            attempt = inbound_endpoints.deliver(endpoint, wire, raw,
                                                return_path=f"{wire['token']}@{rp_domain}")
        except Exception as exc:  # noqa: BLE001  (recorded as a failed attempt, retried)
            log.exception("inbound delivery of message %s crashed", message_id)
            attempt = inbound_endpoints.Attempt(inbound_endpoints.RETRY,
                                                f"internal error: {type(exc).__name__}")
    _record(server_id, message_id, worker, attempt)


def _record(server_id: int, message_id: int, worker: str,
            attempt: inbound_endpoints.Attempt) -> None:
    from chalicelib.services.inbound import endpoints as inbound_endpoints

    with session_scope() as db:
        tenancy.act(db, tenancy.for_server(server_id))
        message = db.get(Message, message_id)
        if message is None or not claims.release(message, worker):
            return
        message.attempts += 1
        message.last_attempt_at = clock.now()
        message.status_details = attempt.details
        status = attempt.status
        if status == inbound_endpoints.RETRY and \
                message.attempts >= get_settings().inbound_max_attempts:
            status = inbound_endpoints.FAILED
            message.status_details = f"gave up after {message.attempts} attempts: {attempt.details}"
        message.status = status
        if status == inbound_endpoints.RETRY:
            delay = retry_delay_seconds(message.attempts)
            message.next_attempt_at = clock.now() + timedelta(seconds=delay)
            queues.enqueue_after_commit(db, QUEUE, message.id, min(delay, queues.SQS_MAX_DELAY))
        else:
            message.next_attempt_at = None
            if status == inbound_endpoints.DELIVERED:
                message.sent_at = clock.now()
        db.add(Delivery(message_id=message.id, status=status, stage="done", host=attempt.host,
                        code=attempt.code, output=attempt.output, details=attempt.details[:2000],
                        duration_ms=attempt.duration_ms))
        after_commit(db, functools.partial(_observe, message_id, status, attempt,
                                           message.attempts))


def _observe(message_id: int, status: str, attempt, attempts: int) -> None:
    from chalicelib.services.inbound import endpoints as inbound_endpoints

    delivered = status == inbound_endpoints.DELIVERED
    observability.count("inbound_delivered" if delivered else "inbound_failed")
    observability.log("inbound.delivery", "info" if delivered else "warning",
                      message_id=message_id, status=status, attempt=attempts, host=attempt.host,
                      code=attempt.code, duration_ms=attempt.duration_ms,
                      details=attempt.details)


def find_due(db: Session, limit: int, grace: float, sweeping: bool = True) -> list[int]:
    return claims.due_ids(db, Message, limit, grace, Message.scope == "incoming",
                          Message.status.in_(DUE_STATUSES), sweeping=sweeping)
