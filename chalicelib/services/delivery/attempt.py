"""One claimed outgoing message, one delivery attempt: the steps in the order they run.

    stale InFlight marker?  -> held: the outcome of the last attempt is unknown
    hold_reason?            -> held (suppressed, development mode)
    unsignable?             -> HardFail
    prepare                 -> the bytes (first attempt only; later ones resend them)
    egress                  -> the IP pool's addresses, or its relay (egress.py)
    route                   -> where it goes (relay, MX hosts); a DNS failure, or a pool that
                               cannot send from here, is an outcome
    pace                    -> may its destination take it now? If not: paced, no attempt
                               (or, every slot taken and one held by a run of this process:
                               handed to that run, which sends it for our claim; handoff.py)
    MTA-STS                 -> the recipient domain's policy, for its MX hosts (mta_sts.py)
    send                    -> SMTP, with the InFlight marker committed right before DATA
    record                  -> decide what the outcome means and write it, with its event
                               (a throttle reply backs the destination off for every worker)

The policy of each step is in ``steps.py``; how the marker and the outcome are written (at
once, or riding on the next message's marker in a batch) is the ``recorder``'s business.

A worker that dies mid-attempt
------------------------------
Right before DATA the worker commits a Delivery row with status ``InFlight`` and stage
``data``; the outcome completes that row. A worker that dies before writing the outcome leaves
the message claimed until its claim expires (CLAIM_TIMEOUT_SECONDS; the sweeper then wakes it
again). The next worker finds the stale ``InFlight`` row and, since the remote server may well
have accepted the message, does NOT resend: the attempt is recorded as ``Unknown`` and the
message is ``Held`` for review (no event fires: none of the four means "outcome unknown"). A
worker that dies before DATA leaves no such row, so the message is simply retried.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

from chalicelib import clock, observability, queues, statuses
from chalicelib.db.models import Delivery
from chalicelib.queues import SQS_MAX_DELAY
from chalicelib.services.delivery import (capture, egress, handoff, mta_sts, pacing,
                                         recorder as recording, client, steps)
from chalicelib.services.delivery.recorder import ClaimLost, Recorder
from chalicelib.services.suppressions import policy as suppressions

log = logging.getLogger(__name__)


def attempt(db, message, worker: str, recorder: Recorder, pacer: pacing.Pacer) -> str:
    """Run the steps for a message claimed by ``worker``; returns what happened ("Sent",
    "SoftFail", "HardFail", "held", "unknown", "paced" or "claim-lost")."""
    if message.stale is not None:
        return resolve_unknown(db, message, message.stale, worker, recorder)
    hold = steps.hold_reason(message)
    if hold is not None:
        return hold_message(db, message, worker, recorder, hold)
    reason = steps.unsignable(message)
    if reason is not None:
        return record(db, message, worker, recorder, client.Outcome(client.HARD, reason), None)
    raw = size = None
    data = message.sent
    if data is None:
        # Prepared once; every attempt sends these same bytes, and GET .../raw shows them.
        # Written with the InFlight marker (or the outcome), and the message's size becomes
        # theirs (DKIM signature, tracking and headers added): one size for the message, the
        # size of what GET .../raw answers.
        data = raw = steps.prepare(db, message)
        size = len(data)
    path = egress.for_pool(db, message.ip_pool_id)
    if not recorder.claim_open and db.in_transaction():
        # No transaction (nor SQLite write lock) stays open during network I/O, except a
        # batch's open claim on PostgreSQL: it commits with this message's first write.
        db.commit()
    domain = message.rcpt_to.rpartition("@")[2]
    try:
        route = client.route(domain, path)
    except client.TargetError as exc:
        outcome = client.Outcome(exc.status, exc.details, recipient_rejected=exc.recipient_rejected)
        return record(db, message, worker, recorder, outcome, None, raw, size)
    return _admit_and_send(db, message, worker, recorder, pacer,
                           _Prepared(domain, path, route, data, raw, size))


class _Prepared(NamedTuple):
    """What the steps before pacing found for a message: where and what it sends."""
    domain: str
    path: egress.Egress
    route: client.Route
    data: bytes
    raw: bytes | None   # prepared by this attempt: stored with the marker (or the outcome)
    size: int | None


def _admit_and_send(db, message, worker: str, recorder: Recorder, pacer: pacing.Pacer,
                    prepared: _Prepared, carried: bool = False) -> str:
    """Pacing's admission, then SMTP. When every connection slot of the destination is taken,
    one by a run of this process, the message is handed to that run (``handoff.py``), which
    comes back here (``carried``) with its own session, recorder and slot, for this
    message's claim (``worker``); what it did is returned as ours."""
    for _ in range(3):
        wait = pacer.admit(db, message, prepared.route.hosts, mx=prepared.route.to_mx)
        if wait is None:
            return _send(db, message, worker, recorder, pacer, prepared)
        if wait.line is None or carried:
            break
        result = _hand_over(db, message, worker, recorder, prepared, wait.line)
        if result is not None:
            return result
        # not started (its holders let go): ask pacing again; the slot may be free now
    return pace(db, message, worker, recorder, wait, prepared.raw, prepared.size)


def _hand_over(db, message, worker: str, recorder: Recorder, prepared: _Prepared,
               line: tuple) -> str | None:
    """Wait while the run holding the destination's slot carries the message: what
    happened, or None when it was not started."""
    recorder.flush()  # nothing of ours waits on a marker meanwhile
    if recorder.claim_open:  # the holder's writes must see our claim: commit it now
        db.commit()

    def carry(holder_db, holder_recorder: Recorder, holder_pacer: pacing.Pacer) -> str:
        return _admit_and_send(holder_db, message, worker, holder_recorder, holder_pacer,
                               prepared, carried=True)

    return handoff.hand_over(line, handoff.Entry(message.id, message.server_id,
                                                 message.claimed_at, carry))


def _send(db, message, worker: str, recorder: Recorder, pacer: pacing.Pacer,
          prepared: _Prepared) -> str:
    """Admitted: SMTP over the pacer's slot, the in-flight marker right before DATA."""
    route, path, raw, size = prepared.route, prepared.path, prepared.raw, prepared.size
    policy = mta_sts.policy_for(prepared.domain) if route.to_mx else None
    in_flight: list[int] = []
    admission = pacer.take_admission()  # on a held slot: decided at the marker

    def before_data(host: str) -> None:
        nonlocal raw
        in_flight.append(recorder.mark_in_flight(db, message.id, host, raw, worker,
                                                 admission))
        raw = None

    try:
        outcome = client.send(route.hosts, mail_from=steps.return_path(message),
                            rcpt_to=message.rcpt_to, data=prepared.data,
                            before_data=before_data, egress=path, policy=policy,
                            relayed=route.relayed,
                            downgrade=steps.seven_bit(message),  # issue 32: no 8BITMIME
                            slot=pacer.session_slot())
    except ClaimLost:  # the session was left without DATA; the row is the other's now
        log.warning("message %s: claim expired before DATA; left to the worker holding it",
                    message.id)
        return "claim-lost"
    except pacing.NotAdmitted:  # the session was left without DATA; nothing was written
        return pace(db, message, worker, recorder, pacer.not_admitted(db), raw, size)
    pacer.settle(db, outcome, admission)
    return record(db, message, worker, recorder, outcome, in_flight[0] if in_flight else None,
                  raw, size)


def pace(db, message, worker: str, recorder: Recorder, wait: pacing.Wait,
         raw: bytes | None, size: int | None) -> str:
    """Its destination may not take the message now: release the claim with the message due
    when it may (woken then), the reason shown; no attempt is counted, no event fires. The
    bytes prepared for it are kept (with their size, as ``record`` keeps them)."""
    delay = max(0.0, (wait.until - clock.now()).total_seconds())
    queues.enqueue_after_commit(db, queues.DELIVERIES, message.id, min(delay, SQS_MAX_DELAY))
    values = pacing.paced_values(message, wait)
    if size is not None:
        values["size"] = size
    pending = recording.outcome(db, message, worker, values, raw=raw,
                                observe=lambda: _paced(message, wait))
    return _said("paced", recorder.write(db, pending))


def record(db, message, worker: str, recorder: Recorder, outcome: client.Outcome,
           attempt_id: int | None, raw: bytes | None = None, size: int | None = None) -> str:
    """Decide what ``outcome`` means for the message and write it; ``size``: of the bytes
    prepared for this first attempt."""
    decision = steps.decide(message, outcome)
    if decision.retry_in is not None:
        queues.enqueue_after_commit(db, queues.DELIVERIES, message.id,
                                    min(decision.retry_in, SQS_MAX_DELAY))
    if decision.suppress is not None:  # the one suppression policy decides (not the digit)
        suppressions.after_failure(db, message.server_id, message.rcpt_to, decision.verdict,
                                   origin="hard_fail", details=decision.suppress,
                                   message_id=message.id)
    values, attempt_row = decision.values, decision.attempt
    if size is not None:
        values = {**values, "size": size}
    # DELIVERY_RELAY=capture: kept, not sent; the inbox entry commits with the outcome.
    captured = capture.CAPTURED if outcome.status == client.SENT and \
        outcome.host == capture.HOST else None
    pending = recording.outcome(
        db, message, worker, values, event=decision.event, attempt=attempt_row,
        attempt_id=attempt_id, raw=raw, captured=captured,
        observe=lambda: _observe(message, values["status"], attempt_row, values["attempts"]))
    return _said(outcome.status, recorder.write(db, pending))


def hold_message(db, message, worker: str, recorder: Recorder, hold: steps.Hold) -> str:
    pending = recording.outcome(
        db, message, worker, {"status": statuses.HELD, "held": True, "next_attempt_at": None,
                              "status_details": hold.status_details},
        event=("MessageHeld", hold.event_details),
        # A server switched to Development: its mail goes to the captured-mail inbox.
        captured=capture.DEVELOPMENT if hold.status_details == steps.DEVELOPMENT else None,
        observe=None if hold.log_reason is None else lambda: _held(message, hold.log_reason))
    return _said("held", recorder.write(db, pending))


def resolve_unknown(db, message, stale_id: int, worker: str, recorder: Recorder) -> str:
    """The last attempt's worker died after starting DATA: hold instead of resending."""
    stale = db.get(Delivery, stale_id)
    stale.status = statuses.UNKNOWN
    stale.details = ("the worker stopped after starting to transmit the message data to "
                     f"{stale.host}; the remote server may have accepted it")
    db.flush()
    host = stale.host
    pending = recording.outcome(db, message, worker, {
        "status": statuses.HELD, "held": True, "next_attempt_at": None,
        "status_details": ("delivery outcome unknown (a worker stopped after sending the "
                           "message data); held for review instead of risking a duplicate")},
        observe=lambda: _held(message, "delivery outcome unknown: the worker stopped after "
                                       f"sending DATA to {host}"))
    return _said("unknown", recorder.write(db, pending))


def _said(result: str, written: bool | None) -> str:
    """What a worker reports for an outcome: ``claim-lost`` when it was not recorded."""
    return "claim-lost" if written is False else result


def _observe(message, status: str, attempt: dict, attempts: int) -> None:
    """The attempt's log line and counter (after its outcome is committed)."""
    observability.count({statuses.SENT: "sent", statuses.SOFT_FAIL: "deferred"}
                        .get(status, "failed"))
    observability.log("delivery.attempt", "info" if status == statuses.SENT else "warning",
                      message_id=message.id, token=message.token, server_id=message.server_id,
                      rcpt_to=message.rcpt_to, status=status, attempt=attempts,
                      host=attempt["host"], code=attempt["code"], stage=attempt["stage"],
                      tls=attempt["tls"], tls_verified=attempt["tls_verified"],
                      mta_sts=attempt["mta_sts"], source_address=attempt["source_address"],
                      duration_ms=attempt["duration_ms"],
                      details=attempt["details"])


def _paced(message, wait: pacing.Wait) -> None:
    observability.count("paced")
    observability.log("delivery.paced", "info", message_id=message.id, token=message.token,
                      server_id=message.server_id, destination=wait.destination,
                      next_attempt_at=wait.until, details=wait.reason)


def _held(message, reason: str) -> None:
    observability.count("held")
    observability.log("delivery.held", "warning", message_id=message.id, token=message.token,
                      server_id=message.server_id, rcpt_to=message.rcpt_to, reason=reason)
