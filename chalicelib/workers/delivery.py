"""The delivery worker (queue "deliveries"): one wake-up -> at most one SMTP attempt.

Steps: load the Message row; not due yet -> re-enqueue for the rest of the wait (at most
900 s, SQS's cap) and stop; claim the row (claims.claim: due, unclaimed, still Pending or
SoftFail) so a duplicate wake-up or a racing worker does nothing; resolve the recipient's MX
hosts; prepare the bytes once (tracking, then DKIM with the From domain's key; later attempts
resend the same bytes from MessageRaw); talk SMTP; then record the Delivery attempt, the new
status, its event, ``next_attempt_at`` and the release of the claim in ONE transaction.

A worker that dies mid-attempt
------------------------------
Right before the DATA command the worker commits a Delivery row with status ``InFlight`` and
stage ``data``. When the attempt finishes, that row becomes the attempt's record. If the
worker dies before committing the outcome, the row stays claimed until its claim expires
(CLAIM_TIMEOUT_SECONDS; the sweeper then wakes it again), so nothing stays locked for ever.
The next worker to claim it finds the stale ``InFlight`` row and, since the remote server may
well have accepted the message, does NOT resend: the attempt is recorded as ``Unknown`` and
the message is ``Held`` for review with status_details saying why (no event fires: none of
the four events means "outcome unknown"). A worker that dies before reaching DATA leaves no
such row (the remote server cannot have accepted anything), so the message is simply retried.

Round trips
-----------
Each of the three transactions is as few statements as possible, written with core SQL
(no ORM unit of work): the claim is one ``UPDATE ... RETURNING`` whose RETURNING also reads
the source, the bytes of an earlier attempt, the signing domain, a stale InFlight attempt and
an active suppression; the InFlight marker (with the prepared bytes) and the outcome (message,
attempt, event, counters, webhook fan-out) are each ONE statement on PostgreSQL, chained with
data-modifying CTEs, and a few statements in one transaction on SQLite (the statements and
how they run: ``workers/delivery_writes.py``). The outcome's counters (``db/counters``) and
webhook rows (``webhooks.fan_out_statement``) are computed here because no ORM flush sees core
statements. The marker and the outcome are both written only while the claim is ours: a
worker whose claim expired during DATA records nothing (``delivery.claim_lost``) over the
next worker's outcome-unknown hold.
"""
from __future__ import annotations

import calendar
import logging
import threading
import uuid as uuid_module
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Callable, NamedTuple

from sqlalchemy import bindparam, func, literal_column, or_, select

from chalicelib import clock, observability, queues
from chalicelib.db import counters, session_scope
from chalicelib.db.engine import autocommit_engine
from chalicelib.db.models import (Delivery, Domain, Message, MessageRaw, Server, Stream,
                                  Submission, Suppression)
from chalicelib.services.delivery import categories, smtp as delivery, retry
from chalicelib.db import claims
from chalicelib.services.dkim import signer
from chalicelib.services.dkim import keys as dkim_keys
from chalicelib.services.domains import names as domains
from chalicelib.services.suppressions import entries, unsubscribe
from chalicelib.services.tracking import engagement
from chalicelib.services.webhooks import hooks
from chalicelib.queues import SQS_MAX_DELAY
from chalicelib.workers import delivery_writes as writes
from chalicelib.workers.registry import QueueWorker, register

log = logging.getLogger(__name__)

QUEUE = "deliveries"
ACTIVE = ("Pending", "SoftFail", "Scheduled")  # Scheduled: due at its send_at
M, D, R = Message.__table__, Delivery.__table__, MessageRaw.__table__
WEBHOOKS_QUEUE = "webhooks"


def _claimed_columns():
    """What the claim's RETURNING reads: the message's own columns, named like Message's
    attributes (so the row works where a Message is expected), and what the attempt needs."""
    now = bindparam(claims.CLAIM_NOW, type_=Suppression.expires_at.type)

    def outer(name: str):
        # RETURNING renders columns unqualified, where a subquery's own table would win.
        return literal_column(f"messages.{name}")

    def domain(column):
        return select(column).where(Domain.id == outer("domain_id")).scalar_subquery()

    return (
        M.c.id, M.c.server_id, M.c.token, M.c.rcpt_to, M.c.mail_from, M.c.scope, M.c.bounce,
        M.c.tag, M.c.metadata.label("metadata_json"), M.c.stream_id, M.c.domain_id,
        M.c.status, M.c.held, M.c.created_at, M.c.attempts, M.c.track_opens,
        M.c.track_clicks,
        select(Server.mode).where(Server.id == outer("server_id")).scalar_subquery()
        .label("server_mode"),
        select(Submission.raw).where(Submission.id == outer("submission_id"))
        .scalar_subquery().label("source"),
        select(R.c.raw).where(R.c.message_id == outer("id")).scalar_subquery().label("sent"),
        domain(Domain.name).label("domain_name"),
        domain(Domain.dkim_selector).label("dkim_selector"),
        domain(Domain.dkim_private_key_encrypted).label("dkim_key"),
        domain(domains.verified_return_path_column()).label("return_path_domain"),
        select(D.c.id).where(D.c.message_id == outer("id"), D.c.status == "InFlight")
        .limit(1).scalar_subquery().label("stale"),
        # suppressions.normalize() in SQL: rcpt_to was validated, so only case can differ.
        # An entry for every stream (key 0) or for the message's stream holds it.
        select(Suppression.reason).where(
            Suppression.server_id == outer("server_id"),
            Suppression.address == func.lower(func.trim(outer("rcpt_to"))),
            Suppression.stream_key.in_((0, func.coalesce(outer("stream_id"), 0))),
            or_(Suppression.expires_at.is_(None), Suppression.expires_at > now))
        .limit(1).scalar_subquery().label("suppressed"),
        # Whether the message carries List-Unsubscribe (services/unsubscribe.py).
        select(or_(Stream.stream_type == "broadcast", Stream.list_unsubscribe))
        .where(Stream.id == outer("stream_id")).scalar_subquery().label("unsubscribable"),
    )


def _claim_statement(many: bool = False):
    return claims.claim_statement(Message, _claimed_columns(), M.c.status.in_(ACTIVE),
                                  M.c.scope == "outgoing", many=many)


# Set by delivery_batch.process_batch while this thread works through a batch.
_batch = threading.local()
_cached = writes.cached


def return_path(message) -> str:
    """The envelope sender: the bounce handler matches DSNs by the token in it."""
    return domains.envelope_sender(message.token, message.return_path_domain)


def process(message_id: int) -> str:
    """Handle one wake-up; returns what happened (for tests and logs). A batch of wake-ups
    goes through ``workers/delivery_batch.py`` instead, around the same steps."""
    worker = claims.worker_id()
    with session_scope() as db:
        # Claim first (the common case is a due row): only a failed claim needs a closer look.
        # The claim's UPDATE ... RETURNING reads everything the attempt needs.
        claim = _cached("claim", _claim_statement)
        params = claims.claim_params(message_id, worker)
        claim_now = params[claims.CLAIM_NOW]
        rows = claim_rows(db, claim, params)
        message = rows[0] if rows else None
        if message is None:
            return not_claimed(db, message_id, claim_now)
        try:
            return _attempt(db, message, worker)
        except BaseException:
            # Leave the claim: it expires and the row is retried (an unexpected error must not
            # turn into a tight loop). The session rolls back anything uncommitted.
            log.exception("delivery of message %s failed unexpectedly", message_id)
            raise


def claim_rows(db, claim, params: dict):
    """Run a claim statement (one or many rows) and return its rows, fetched."""
    autocommit = autocommit_engine()
    if autocommit is not None:  # one statement: its own transaction, committed at once
        with autocommit.connect() as conn:
            return conn.execute(claim, params).all()
    return db.execute(claim, params).all()


def not_claimed(db, message_id: int, claim_now=None) -> str:
    """Why a wake-up's claim failed: nothing to do, woken early (sleep again for the rest,
    nothing else), or another worker holds the row. Early means "not due at the claim's own
    now", not at a later now: a wake-up microseconds ahead of its row was otherwise dropped
    as claimed elsewhere."""
    db.rollback()
    message = db.get(Message, message_id)
    if message is None or message.status not in ACTIVE or \
            message.scope != "outgoing" or message.next_attempt_at is None:
        return "nothing-to-do"
    if message.next_attempt_at > (claim_now or clock.now()):
        wait = max(0.0, (message.next_attempt_at - clock.now()).total_seconds())
        queues.enqueue_after_commit(db, QUEUE, message_id, min(wait, SQS_MAX_DELAY))
        return "early"
    return "claimed-elsewhere"


def _attempt(db, message, worker: str) -> str:
    if message.stale is not None:
        return _resolve_unknown(db, message, message.stale, worker)
    if message.suppressed is not None:
        return _said("held", _finish(
            db, message, worker, {"status": "Held", "held": True, "next_attempt_at": None,
                                  "status_details": "the recipient is on the suppression list"},
            event=("MessageHeld", f"{message.rcpt_to} is on the suppression list "
                                  f"({message.suppressed})"),
            observe=lambda: _held(message, "the recipient is on the suppression list")))
    if message.server_mode == "Development":  # switched to Development after submission
        return _said("held", _finish(
            db, message, worker, {"status": "Held", "held": True, "next_attempt_at": None,
                                  "status_details": "server in development mode"},
            event=("MessageHeld", "server in development mode; not sent")))
    if message.domain_name is None or message.source is None:
        outcome = delivery.Outcome(delivery.HARD, "the sending domain (or the message source) "
                                   "was removed from the server; the message cannot be signed")
        return _record(db, message, worker, outcome, None)
    raw = None
    data = message.sent
    if data is None:
        # Prepared once (tracking, then DKIM); every attempt sends these same bytes, and GET
        # .../raw shows them. Written with the InFlight marker (or the outcome).
        data = raw = _prepare(db, message)
    if not getattr(_batch, "claim_open", False):
        # No transaction (nor SQLite write lock) stays open during network I/O, except a
        # batch's open claim on PostgreSQL: it commits with this first message's marker or
        # outcome (workers/delivery_batch.py, "One commit for the claim and the first marker").
        db.commit()
    try:
        hosts = delivery.targets(message.rcpt_to.rpartition("@")[2])
    except delivery.TargetError as exc:
        outcome = delivery.Outcome(exc.status, exc.details,
                                   recipient_rejected=exc.recipient_rejected)
        return _record(db, message, worker, outcome, None, raw)
    in_flight: list[int] = []

    def before_data(host: str) -> None:
        nonlocal raw
        in_flight.append(_mark_in_flight(db, message.id, host, raw, worker))
        raw = None

    try:
        outcome = delivery.send(hosts, mail_from=return_path(message), rcpt_to=message.rcpt_to,
                                data=data, before_data=before_data)
    except ClaimLost:  # the session was closed without DATA; the row is the other's now
        log.warning("message %s: claim expired before DATA; left to the worker holding it",
                    message.id)
        return "claim-lost"
    return _record(db, message, worker, outcome, in_flight[0] if in_flight else None, raw)


def _prepare(db, message) -> bytes:
    prepared = engagement.prepare_outgoing(db, message, message.source)
    if message.unsubscribable:  # before DKIM: the signature must cover both headers
        prepared = unsubscribe.add_headers(prepared, message.id)
    key = dkim_keys.private_key(message.dkim_key)
    return signer.sign_message(prepared, domain=message.domain_name,
                                     selector=message.dkim_selector, private_pem=key)


class ClaimLost(Exception):
    """Our claim on the row expired and another worker took it: stop before DATA."""


def _mark_in_flight(db, message_id: int, host: str, raw: bytes | None, worker: str) -> int:
    params = {"i_mid": message_id, "i_host": host, "i_now": clock.now(), "i_worker": worker}
    if raw is not None:
        params["i_raw"] = raw
    key = ("in_flight", raw is not None)
    build = lambda: writes.in_flight_statements(raw is not None)  # noqa: E731
    batch = getattr(_batch, "deferred", None)
    if batch is not None and batch.has_outcome():
        # The previous message's outcome commits with this marker (delivery_batch.py)
        return batch.write_with_marker(db, key, build, params)
    # run() commits: the marker is durable before the remote server can accept the message
    markers = writes.run(db, key, [(build, "marker", False)], params).get("marker")
    if not markers:
        raise ClaimLost(f"the claim on message {message_id} expired before DATA")
    return markers[0]


class PendingOutcome(NamedTuple):
    """An outcome's statements and what follows their commit (``settle``)."""
    message: Any
    status: str | None
    key: tuple
    build: Callable[[], list]
    params: dict
    wants_hooks: bool
    observe: Callable[[], None] | None


def _finish(db, message, worker: str, values: dict, *, event: tuple[str, str] | None = None,
            attempt: dict | None = None, attempt_id: int | None = None,
            raw: bytes | None = None, observe: Callable[[], None] | None = None) -> bool | None:
    """The outcome's writes in one transaction, guarded on our claim: the message (and the
    release of the claim), the attempt, the prepared bytes, the event with its counters and
    webhook rows. Commits; the webhook rows are woken when the session scope ends and
    ``observe`` (its log line and counter) runs once it is written. False when the claim was
    no longer ours (nothing written, ``delivery.claim_lost`` logged); None when deferred to
    the batch's next write."""
    dialect = db.get_bind().dialect.name
    now = clock.now()
    params = {"m_id": message.id, "m_now": now, "m_worker": worker,
              **{f"m_{k}": v for k, v in values.items()}}
    if attempt is not None:
        params.update({f"a_{k}": v for k, v in attempt.items()}, a_id=attempt_id)
    if raw is not None:
        params["r_raw"] = raw
    deltas: Counter = Counter()
    before = (message.scope, message.status, message.bounce, message.held, message.stream_id,
              message.tag, message.created_at)
    after = (message.scope, values.get("status", message.status), message.bounce,
             values.get("held", message.held), message.stream_id, message.tag,
             message.created_at)
    if before != after:
        counters.message_change(message.server_id, before, after, deltas)
    if event is not None:
        name, details = event
        event_uuid = str(uuid_module.uuid4())
        body = hooks.build_body(name, event_uuid, calendar.timegm(now.timetuple()),
                                   hooks.message_fields(message), details)
        params.update(e_server=message.server_id, e_event=name, e_uuid=event_uuid,
                      e_details=details, e_body=body, wh_event=name)
        counters.event_inserted(message.server_id, name, now, deltas)
    items = sorted((key, n) for key, n in deltas.items() if n)
    if dialect not in ("postgresql", "sqlite"):
        items = []
    params.update(counters.upsert_params(items))
    shape = ("finish", tuple(values), tuple(attempt) if attempt is not None else None,
             attempt_id is not None, raw is not None, len(items), event is not None)
    build = lambda: writes.finish_statements(dialect, *shape[1:5], items,  # noqa: E731
                                             event is not None)
    outcome = PendingOutcome(message, values.get("status"), shape, build, params,
                             event is not None, observe)
    batch = getattr(_batch, "deferred", None)
    if batch is not None and not db.in_transaction():
        # In a batch the outcome is written with the next message's in-flight marker, or at
        # the batch's end: one commit fewer per message (workers/delivery_batch.py).
        batch.defer(db, outcome)
        return None
    return settle(db, outcome, writes.run(db, shape, [(build, "hook", True)], params))


def settle(db, outcome: PendingOutcome, tagged: dict[str, list[int]]) -> bool:
    """After an outcome's write: wake its webhook rows and observe it; or, when its claim was
    no longer ours (it expired during the attempt and another worker took the message, which
    it may already have held as outcome-unknown), say so: nothing of it was written."""
    message = outcome.message
    if writes.CLAIM not in tagged:
        observability.log("delivery.claim_lost", "warning", message_id=message.id,
                          token=message.token, server_id=message.server_id,
                          outcome=outcome.status,
                          details="the claim expired and another worker took the message; "
                                  "this outcome was not recorded")
        return False
    wake_webhooks(db, tagged.get("hook", []) if outcome.wants_hooks else [])
    if outcome.observe is not None:
        outcome.observe()
    return True


def wake_webhooks(db, hooks: list[int]) -> None:
    for hook_id in hooks:  # woken when the session scope ends, after every commit
        queues.enqueue_after_commit(db, WEBHOOKS_QUEUE, hook_id)


def _record(db, message, worker: str, outcome: delivery.Outcome, attempt_id: int | None,
            raw: bytes | None = None) -> str:
    now = clock.now()
    attempts = message.attempts + 1
    status = outcome.status
    details = outcome.details
    values = {"attempts": attempts, "last_attempt_at": now}
    attempt_status = status
    if status == delivery.SENT:
        values.update(status="Sent", sent_at=now, next_attempt_at=None)
        event = ("MessageSent", details)
    elif status == delivery.SOFT and (wait := retry.delay_seconds(attempts)) is not None:
        next_at = now + timedelta(seconds=wait)
        values.update(status="SoftFail", next_attempt_at=next_at)
        event = ("MessageDelayed", f"{details}; attempt {attempts} of {retry.max_attempts()}, "
                                   f"next attempt at {next_at.replace(microsecond=0).isoformat()}Z")
        queues.enqueue_after_commit(db, QUEUE, message.id, min(wait, SQS_MAX_DELAY))
    else:
        if status == delivery.SOFT:
            details = f"retries exhausted after {attempts} attempts; last: {details}"
            attempt_status = delivery.HARD
        values.update(status="HardFail", next_attempt_at=None)
        event = ("MessageDeliveryFailed", details)
        if outcome.recipient_rejected:
            entries.suppress(db, message.server_id, message.rcpt_to, reason="HardBounce",
                                  origin="hard_fail", details=f"hard failure: {details}"[:1000])
    category = None
    if status != delivery.SENT:
        # A hard failure with no host tried is the DNS saying the domain takes no mail.
        category = categories.classify(
            code=outcome.code, text=outcome.output or details,
            no_route=outcome.host is None and outcome.recipient_rejected)
        values["bounce_category"] = category  # kept when a retry is sent
    values["status_details"] = details
    attempt = dict(status=attempt_status, stage=outcome.stage, host=outcome.host,
                   code=outcome.code, output=outcome.output, details=details, category=category,
                   tls=outcome.tls,
                   duration_ms=outcome.duration_ms, created_at=now)
    return _said(status, _finish(
        db, message, worker, values, event=event, attempt=attempt, attempt_id=attempt_id,
        raw=raw, observe=lambda: _observe(message, values["status"], attempt, attempts)))


def _said(result: str, written: bool | None) -> str:
    """What a worker reports for an outcome: ``claim-lost`` when it was not recorded."""
    return "claim-lost" if written is False else result


def _observe(message, status: str, attempt: dict, attempts: int) -> None:
    """The attempt's log line and counter (after its outcome is committed)."""
    observability.count({"Sent": "sent", "SoftFail": "deferred"}.get(status, "failed"))
    observability.log("delivery.attempt", "info" if status == "Sent" else "warning",
                      message_id=message.id, token=message.token, server_id=message.server_id,
                      rcpt_to=message.rcpt_to, status=status, attempt=attempts,
                      host=attempt["host"], code=attempt["code"], stage=attempt["stage"],
                      tls=attempt["tls"], duration_ms=attempt["duration_ms"],
                      details=attempt["details"])


def _resolve_unknown(db, message, stale_id: int, worker: str) -> str:
    stale = db.get(Delivery, stale_id)
    stale.status = "Unknown"
    stale.details = ("the worker stopped after starting to transmit the message data to "
                     f"{stale.host}; the remote server may have accepted it")
    db.flush()
    host = stale.host
    return _said("unknown", _finish(db, message, worker, {
        "status": "Held", "held": True, "next_attempt_at": None,
        "status_details": ("delivery outcome unknown (a worker stopped after sending the "
                           "message data); held for review instead of risking a duplicate")},
        observe=lambda: _held(message, "delivery outcome unknown: the worker stopped after "
                                       f"sending DATA to {host}")))


def _held(message, reason: str) -> None:
    observability.count("held")
    observability.log("delivery.held", "warning", message_id=message.id, token=message.token,
                      server_id=message.server_id, rcpt_to=message.rcpt_to, reason=reason)


def find_due(db, limit: int, grace: float) -> list[int]:
    return claims.due_ids(db, Message, limit, grace, Message.status.in_(ACTIVE),
                          Message.scope == "outgoing")


def process_batch(message_ids: list[int]) -> dict[int, str]:
    from chalicelib.workers import delivery_batch  # imports this module

    return delivery_batch.process_batch(message_ids)


register(QueueWorker(QUEUE, process=process, find_due=find_due, process_batch=process_batch))
