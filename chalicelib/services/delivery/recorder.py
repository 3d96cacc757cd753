"""Writing what an attempt did: the InFlight marker right before DATA, and the outcome (the
message's new status and the release of its claim, the attempt, the prepared bytes, the event
with its counters and webhook rows) in one transaction, guarded on the claim.

A ``Recorder`` writes each as soon as it is known: one wake-up, one message. A batch of
wake-ups uses ``batch.BatchRecorder``, which lets an outcome ride on the next message's
marker (one commit fewer per message). The attempt's steps (``attempt.py``) do not know which
one they were handed.

The writes themselves are core SQL built once per shape (``writes.py``). The outcome's
counters (``db/counters``) and webhook rows (``webhooks.payload``) are computed here because
no ORM flush sees core statements. Both writes happen only while the claim is ours: a worker
whose claim expired during DATA records nothing (``delivery.claim_lost``) over the next
worker's outcome-unknown hold, and does not reach DATA at all when it expired before.
"""
from __future__ import annotations

import calendar
import uuid as uuid_module
from collections import Counter
from typing import Any, Callable, NamedTuple

from chalicelib import clock, observability, queues
from chalicelib.db import counters
from chalicelib.services import content
from chalicelib.services.delivery import pacing, writes
from chalicelib.services.reputation import outcomes as reputation
from chalicelib.services.webhooks import payload as webhook_payload


ADMITTED = "admitted"  # tag: the marker's pacing admission matched (its throttles)


class ClaimLost(Exception):
    """Our claim on the row expired and another worker took it: stop before DATA."""


class PendingOutcome(NamedTuple):
    """An outcome's statements and what follows their commit (``Recorder.settle``)."""
    message: Any
    status: str | None
    key: tuple
    build: Callable[[], list]
    params: dict
    wants_hooks: bool
    observe: Callable[[], None] | None


def outcome(db, message, worker: str, values: dict, *, event: tuple[str, str] | None = None,
            attempt: dict | None = None, attempt_id: int | None = None,
            raw: bytes | None = None, captured: str | None = None,
            observe: Callable[[], None] | None = None) -> PendingOutcome:
    """The outcome's writes, not yet run: the message (``values``, and the release of the
    claim), the attempt (new, or the InFlight row ``attempt_id`` completed), the prepared
    bytes, the captured-mail inbox entry (``captured``: its reason), the event with its
    counters and webhook rows. ``observe`` (its log line and counter) runs once it is
    written."""
    dialect = db.get_bind().dialect.name
    now = clock.now()
    if attempt is not None:  # its bounce and infrastructure signal, if any, commit with it
        reputation.delivery_outcome(db, message, attempt)
    params = {"m_id": message.id, "m_now": now, "m_worker": worker,
              **{f"m_{k}": v for k, v in values.items()}}
    if attempt is not None:
        params.update({f"a_{k}": v for k, v in attempt.items()}, a_id=attempt_id)
    if raw is not None:  # stored before the row naming them can commit
        params.update(_content_params("r", content.put(raw)))
    if captured is not None:
        params.update(c_server=message.server_id, c_reason=captured)
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
        body = webhook_payload.build_body(name, event_uuid, calendar.timegm(now.timetuple()),
                                          webhook_payload.message_fields(message), details)
        params.update(e_server=message.server_id, e_event=name, e_uuid=event_uuid,
                      e_details=details, e_body=body, wh_event=name)
        counters.event_inserted(message.server_id, name, now, deltas)
    items = sorted((key, n) for key, n in deltas.items() if n)
    if dialect not in ("postgresql", "sqlite"):
        items = []
    params.update(counters.upsert_params(items))
    shape = ("finish", tuple(values), tuple(attempt) if attempt is not None else None,
             attempt_id is not None, raw is not None, len(items), event is not None,
             captured is not None)
    build = lambda: writes.finish_statements(dialect, *shape[1:5], items,  # noqa: E731
                                             event is not None, captured is not None)
    return PendingOutcome(message, values.get("status"), shape, build, params,
                          event is not None, observe)


class Recorder:
    """Writes a marker or an outcome at once, each its own commit."""

    #: A batch's claim still uncommitted in the session (PostgreSQL): it commits with the
    #: first write, so nothing may commit before (``batch.py``). Never so for one wake-up.
    claim_open = False

    def mark_in_flight(self, db, message_id: int, host: str, raw: bytes | None,
                       worker: str, admission: pacing.Admission | None = None) -> int:
        """The InFlight marker (with the prepared bytes, on the first attempt), committed
        before the remote server can accept the message; returns its Delivery id. Raises
        ClaimLost when the claim is no longer ours (nothing is written then).
        ``admission``: the message's pacing admission, decided in the same statement
        (PostgreSQL); raises pacing.NotAdmitted when it did not match (nothing is written
        for the message then)."""
        params = {"i_mid": message_id, "i_host": host, "i_now": clock.now(), "i_worker": worker}
        if raw is not None:  # stored before the row naming them can commit
            params.update(_content_params("i", content.put(raw)))
        key = ("in_flight", raw is not None, admission is not None)
        parts = []
        if admission is not None:
            params.update(admission.params)
            dialect = db.get_bind().dialect.name
            parts.append((lambda: pacing.admission_statements(dialect)[0], ADMITTED, False))
            build = lambda: writes.in_flight_statements(  # noqa: E731
                raw is not None, pacing.admission_statements(dialect)[1])
        else:
            build = lambda: writes.in_flight_statements(raw is not None)  # noqa: E731
        parts.append((build, "marker", False))
        pending = self.take_pending()
        if pending is not None:  # a previous message's outcome, written in the same commit
            key = ("with_marker", key, pending.key)
            parts.append((pending.build, "hook", True))
            params = {**params, **pending.params}
        tagged = writes.run(db, key, parts, params)
        if pending is not None:
            self.settle(db, pending, tagged)
        if admission is not None:
            if not tagged.get(ADMITTED):
                raise pacing.NotAdmitted(f"message {message_id}: its destination may not "
                                         "take it now")
            admission.throttles = tagged[ADMITTED][0]
        markers = tagged.get("marker")
        if not markers:
            raise ClaimLost(f"the claim on message {message_id} expired before DATA")
        return markers[0]

    def take_pending(self) -> PendingOutcome | None:
        """An outcome waiting to ride on the next marker: never, here."""
        return None

    def holds(self, message_id: int) -> bool:
        """The message's outcome waits to ride on the next marker (not written yet)."""
        return False

    def was_lost(self, message_id: int) -> bool:
        """The message's outcome, written later than its attempt, found its claim taken."""
        return False

    def flush(self) -> None:
        """Write an outcome still waiting for a marker: none, here."""

    def write(self, db, pending: PendingOutcome) -> bool | None:
        """Write an outcome and commit. False when the claim was no longer ours (nothing
        written, ``delivery.claim_lost`` logged)."""
        return self.settle(db, pending, writes.run(db, pending.key,
                                                   [(pending.build, "hook", True)],
                                                   pending.params))

    def settle(self, db, pending: PendingOutcome, tagged: dict[str, list[int]]) -> bool:
        """After an outcome's write: wake its webhook rows and observe it; or, when its claim
        was no longer ours (it expired during the attempt and another worker took the
        message, which it may already have held as outcome-unknown), say so."""
        message = pending.message
        if writes.CLAIM not in tagged:
            observability.log("delivery.claim_lost", "warning", message_id=message.id,
                              token=message.token, server_id=message.server_id,
                              outcome=pending.status,
                              details="the claim expired and another worker took the "
                                      "message; this outcome was not recorded")
            return False
        for hook_id in tagged.get("hook", []) if pending.wants_hooks else []:
            # woken when the session scope ends, after every commit
            queues.enqueue_after_commit(db, queues.WEBHOOKS, hook_id)
        if pending.observe is not None:
            pending.observe()
        return True


def _content_params(prefix: str, ref: content.Ref) -> dict:
    return {f"{prefix}_content_key": ref.key, f"{prefix}_size": ref.size,
            f"{prefix}_content_sha256": ref.sha256}
