"""The delivery policy, one decision per step, each a plain function of the claimed message:
``attempt.py`` runs them in order for every message, alone or in a batch.

1. ``hold_reason``: a message that must not go is held (suppressed recipient, a server
   switched to Development after submission).
2. ``prepare``: the bytes, once (tracking, then List-Unsubscribe, then DKIM with the From
   domain's key); every later attempt resends these same bytes. ``seven_bit``: to a server
   that does not offer 8BITMIME, an 8-bit message goes converted to 7-bit and signed again
   (``declarations.py`` says when; the recipient's server that lacks SMTPUTF8 for a message
   that needs it is a permanent failure that never suppresses the recipient).
3. ``return_path``: the envelope sender, whose token the bounce handler matches.
4. ``decide``: what an attempt's outcome means: Sent; SoftFail with the next attempt on the
   retry schedule; HardFail (refused, or retries exhausted); the failure's verdict
   (``services/failures/``: reason, category, whether the address is bad) on every failure;
   and, for a final failure the remote server or the DNS gave, the verdict handed to the
   suppression policy (``services/suppressions/policy.py``), which decides whether the
   recipient is suppressed.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Callable, NamedTuple

from chalicelib import clock, statuses
from chalicelib.services import failures, mime
from chalicelib.services.delivery import retry, client
from chalicelib.services.dkim import keys as dkim_keys, signer
from chalicelib.services.domains import names as domain_names
from chalicelib.services.suppressions import unsubscribe
from chalicelib.services.tracking import engagement

SUPPRESSED = "the recipient is on the suppression list"
DEVELOPMENT = "server in development mode"


class Hold(NamedTuple):
    status_details: str  # on the message
    event_details: str   # on its MessageHeld event
    log_reason: str | None  # delivery.held log line; None: not logged


def hold_reason(message) -> Hold | None:
    """Why the claimed message must not be sent now, or None."""
    if message.suppressed is not None:
        return Hold(SUPPRESSED, f"{message.rcpt_to} is on the suppression list "
                                f"({message.suppressed})", SUPPRESSED)
    if message.server_mode == "Development":  # switched to Development after submission
        return Hold(DEVELOPMENT, f"{DEVELOPMENT}; not sent", None)
    return None


def unsignable(message) -> str | None:
    """Why the message can never be signed (its domain or source is gone), or None."""
    if message.domain_name is None or not message.has_source:
        return ("the sending domain (or the message source) was removed from the server; "
                "the message cannot be signed")
    return None


def prepare(db, message) -> bytes:
    """The bytes to send: tracking rewritten, List-Unsubscribe added (before DKIM: the
    signature must cover both headers), DKIM-signed with the domain's active key."""
    prepared = engagement.prepare_outgoing(db, message, message.source)
    if message.unsubscribable:
        prepared = unsubscribe.add_headers(prepared, message.id)
    return signer.sign_message(prepared, domain=message.domain_name,
                               selector=message.dkim_selector,
                               private_pem=dkim_keys.private_key(message.dkim_key))


def seven_bit(message) -> Callable[[bytes], bytes]:
    """Issue 32 (RFC 6152): for a server that does not offer 8BITMIME, the prepared bytes
    in 7-bit: our DKIM signature removed, the 8-bit parts made quoted-printable (base64
    where that is wrong; ``mime.to_seven_bit``), then signed again with the same key, so
    the signature covers what is sent. GET .../raw keeps showing the prepared bytes."""
    def convert(signed: bytes) -> bytes:
        return signer.sign_message(mime.to_seven_bit(signer.unsigned(signed)),
                                   domain=message.domain_name,
                                   selector=message.dkim_selector,
                                   private_pem=dkim_keys.private_key(message.dkim_key))
    return convert


def return_path(message) -> str:
    """The envelope sender: the bounce handler matches DSNs by the token in it."""
    return domain_names.envelope_sender(message.token, message.return_path_domain)


class Decision(NamedTuple):
    values: dict            # the message's new columns
    event: tuple[str, str]  # (event, details)
    attempt: dict           # the Delivery row
    retry_in: float | None  # seconds until the next attempt (SoftFail)
    # A final failure for the suppression policy: its details (None: nothing to decide) and
    # its verdict (policy.after_failure decides whether the recipient is suppressed)
    suppress: str | None
    verdict: failures.Verdict | None = None


def decide(message, outcome: client.Outcome) -> Decision:
    now = clock.now()
    attempts = message.attempts + 1
    status, details = outcome.status, outcome.details
    values = {"attempts": attempts, "last_attempt_at": now}
    attempt_status = status
    retry_in = suppress = None
    if status == client.SENT:
        values.update(status=statuses.SENT, sent_at=now, next_attempt_at=None)
        event = ("MessageSent", details)
    elif status == client.SOFT and (retry_in := retry.delay_seconds(attempts)) is not None:
        next_at = now + timedelta(seconds=retry_in)
        values.update(status=statuses.SOFT_FAIL, next_attempt_at=next_at)
        event = ("MessageDelayed", f"{details}; attempt {attempts} of {retry.max_attempts()}, "
                                   f"next attempt at {next_at.replace(microsecond=0).isoformat()}Z")
    else:
        if status == client.SOFT:
            details = f"retries exhausted after {attempts} attempts; last: {details}"
            attempt_status = client.HARD
        values.update(status=statuses.HARD_FAIL, next_attempt_at=None)
        event = ("MessageDeliveryFailed", details)
    category = reason = verdict = None
    if status != client.SENT:
        verdict = failure_verdict(outcome, details)
        category, reason = verdict.category, verdict.reason
        # kept when a retry is sent
        values.update(bounce_category=category, bounce_reason=reason)
        # Only what the recipient's side said (a reply, or the DNS: no host was tried) is
        # evidence about the recipient; a failure of our own (unsignable) is not.
        if values["status"] == statuses.HARD_FAIL and \
                (outcome.host is not None or outcome.recipient_rejected):
            suppress = f"hard failure: {details}"[:1000]
    values["status_details"] = details
    if outcome.host is not None:  # a server heard this envelope sender: bounces come to it
        values["return_path"] = domain_names.envelope_host(message.return_path_domain)
    attempt = dict(status=attempt_status, stage=outcome.stage, host=outcome.host,
                   code=outcome.code, output=outcome.output, details=details, category=category,
                   reason=reason,
                   tls=outcome.tls, tls_verified=outcome.tls_verified, mta_sts=outcome.mta_sts,
                   source_address=outcome.source_address, duration_ms=outcome.duration_ms,
                   created_at=now)
    return Decision(values, event, attempt, retry_in, suppress, verdict)


def failure_verdict(outcome: client.Outcome, details: str) -> failures.Verdict:
    """The verdict on a failed attempt: the remote reply (code and text), or the DNS when no
    host was tried and the domain takes no mail; a permanent refusal of the envelope sender
    is never about the recipient, and a refusal of the data after the recipient was accepted
    suppresses only when repeated."""
    no_route = outcome.host is None and outcome.recipient_rejected
    sender = outcome.status == client.HARD and outcome.host is not None and \
        not outcome.recipient_rejected and (outcome.code or 0) >= 500
    return failures.classify(code=outcome.code, text=outcome.output or details,
                             no_route=no_route, sender=sender,
                             after_data=outcome.stage in ("data", "done"))
