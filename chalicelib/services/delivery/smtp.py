"""One delivery attempt of one outgoing message over SMTP (no database in here).

``targets(domain)`` answers where the mail goes: DELIVERY_RELAY when set (``capture``: kept in
the captured-mail inbox, see capture.py; ``mx``: as when empty), else the recipient
domain's MX hosts in preference order (equal preferences shuffled), else the domain itself
when it has A/AAAA records but no MX (RFC 5321 5.1). A null MX (RFC 7505) or a domain that
does not exist is a permanent failure; a DNS timeout is a temporary one.

``send(...)`` walks the targets in order until one of them answers the envelope: a host that
cannot be reached, or refuses the connection at the greeting, passes the message on to the
next. STARTTLS is used whenever offered (opportunistic TLS as in RFC 7435: certificates are
not verified, since MX certificates rarely match and a refusal would only push the mail to
plain text). ``before_data`` is called right before the DATA command, so the caller can
record that the end-of-data stage is about to be reached (see attempt.py).

Connections are reused: after a session answered a message (accepted it, or refused it with
anything but 421), it stays open (per thread, per host, at most IDLE_REUSE_SECONDS idle) and
the next message to the same host starts with MAIL FROM on it (RSET first when the previous
transaction was left half-way), as
Postfix's connection cache does. A cached session found dead (or answering 421) at RSET or
MAIL is replaced by a fresh one; nothing of the new message had been sent, so this is safe.

Outcomes: 2xx after DATA -> Sent; a 5xx to MAIL, RCPT or DATA -> HardFail; a 4xx, a dropped
connection, a timeout or no reachable host -> SoftFail.
"""
from __future__ import annotations

import random
import smtplib
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from chalicelib.config import get_settings
from chalicelib import dns_lookup, statuses

SENT, SOFT, HARD = statuses.SENT, statuses.SOFT_FAIL, statuses.HARD_FAIL
MAX_OUTPUT = 1000
CAPTURE = ("capture", 0)  # DELIVERY_RELAY=capture: kept, never sent (delivery/capture.py)


@dataclass
class Outcome:
    status: str                 # Sent, SoftFail, HardFail
    details: str
    host: str | None = None
    code: int | None = None
    output: str | None = None   # the remote server's reply text
    tls: bool = False
    stage: str = "connect"      # connect, envelope, data, done
    duration_ms: int = 0
    # True when the remote server permanently refused this recipient or message (not the
    # sender, not the DNS): the recipient is suppressed.
    recipient_rejected: bool = False
    tried: list[str] = field(default_factory=list)


class TargetError(Exception):
    def __init__(self, status: str, details: str, recipient_rejected: bool = False):
        super().__init__(details)
        self.status = status
        self.details = details
        self.recipient_rejected = recipient_rejected


def parse_relay(value: str) -> tuple[str, int]:
    value = value.strip()
    if value.startswith("["):  # [::1]:2525
        host, _, rest = value[1:].partition("]")
        return host, int(rest.lstrip(":") or 25)
    if value.count(":") == 1:
        host, port = value.split(":")
        return host, int(port)
    return value, 25


def targets(domain: str) -> list[tuple[str, int]]:
    """(host, port) pairs to try for ``domain``; raises TargetError when there are none."""
    settings = get_settings()
    relay = settings.delivery_relay.strip()
    if relay.lower() == "capture":
        return [CAPTURE]
    if relay and relay.lower() != "mx":
        return [parse_relay(relay)]
    lifetime = min(30.0, settings.delivery_timeout_seconds)
    try:
        answer = dns_lookup.resolve(domain, "MX", lifetime)
    except dns_lookup.NXDOMAIN:
        raise TargetError(HARD, f"the domain {domain} does not exist (NXDOMAIN)", True) from None
    except dns_lookup.NoAnswer:
        return [(_implicit_mx(domain, lifetime), 25)]
    except dns_lookup.UNAVAILABLE as exc:
        raise TargetError(SOFT, f"DNS lookup of MX {domain} failed: {exc}") from None
    records = sorted(answer, key=lambda r: (r.preference, random.random()))
    hosts = [r.exchange.to_text(omit_final_dot=True) for r in records]
    hosts = [h for h in hosts if h not in ("", ".")]
    if not hosts:
        raise TargetError(HARD, f"{domain} publishes a null MX: it accepts no mail", True)
    return [(host, 25) for host in hosts]


def _implicit_mx(domain: str, lifetime: float) -> str:
    for rdtype in ("A", "AAAA"):
        try:
            dns_lookup.resolve(domain, rdtype, lifetime)
            return domain
        except (dns_lookup.NoAnswer, dns_lookup.NXDOMAIN):
            continue
        except dns_lookup.UNAVAILABLE as exc:
            raise TargetError(SOFT, f"DNS lookup of {domain} failed: {exc}") from None
    raise TargetError(HARD, f"{domain} has no MX, A or AAAA record", True)


def _text(reply: bytes | str | None) -> str | None:
    if reply is None:
        return None
    if isinstance(reply, bytes):
        reply = reply.decode("utf-8", "replace")
    return reply.replace("\r", " ").replace("\n", " ")[:MAX_OUTPUT]


def _tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


IDLE_REUSE_SECONDS = 20.0
MAX_CACHED = 8
_cache = threading.local()


def _take_cached(host: str, port: int):
    conns: dict = getattr(_cache, "conns", {})
    entry = conns.pop((host, port), None)
    if entry is None:
        return None
    smtp, tls, clean, since = entry
    if time.monotonic() - since > IDLE_REUSE_SECONDS:
        _close(smtp)
        return None
    return smtp, tls, clean


def _put_cached(host: str, port: int, smtp, tls: bool, clean: bool) -> None:
    conns: dict = _cache.__dict__.setdefault("conns", {})
    while len(conns) >= MAX_CACHED:
        _close(conns.pop(next(iter(conns)))[0])
    conns[(host, port)] = (smtp, tls, clean, time.monotonic())


def _close(smtp) -> None:
    try:
        smtp.quit()
    except Exception:  # noqa: BLE001  (closing a session we are done with)
        smtp.close()


def close_cached() -> None:
    """Close this thread's cached sessions (tests, shutdown)."""
    conns: dict = getattr(_cache, "conns", {})
    while conns:
        _close(conns.popitem()[1][0])


class _NextHost(Exception):
    """This host could not take the message; try the next one."""


def send(hosts: list[tuple[str, int]], *, mail_from: str, rcpt_to: str, data: bytes,
         before_data: Callable[[str], None] | None = None) -> Outcome:
    """Try ``hosts`` in order; returns the Outcome of the host that answered the envelope
    (or the last failure when none did)."""
    started = time.perf_counter()
    if hosts == [CAPTURE]:
        return _capture(mail_from, rcpt_to, data, started)
    tried: list[str] = []
    last = Outcome(SOFT, "no host to try")
    for host, port in hosts:
        label = f"{host}:{port}" if port != 25 else host
        tried.append(label)
        outcome = Outcome(SOFT, "", host=label)
        try:
            _converse(host, port, outcome, mail_from=mail_from, rcpt_to=rcpt_to, data=data,
                      before_data=before_data)
        except _NextHost:
            last = outcome
            continue
        last = outcome
        break
    last.tried = tried
    last.duration_ms = int((time.perf_counter() - started) * 1000)
    if last.status == SOFT and last.stage == "connect" and len(tried) > 1:
        last.details = f"no host accepted a connection ({', '.join(tried)}): {last.details}"
    return last


def _capture(mail_from: str, rcpt_to: str, data: bytes, started: float) -> Outcome:
    from chalicelib.services.delivery import capture

    try:
        path = capture.keep(mail_from=mail_from, rcpt_to=rcpt_to, data=data)
    except OSError as exc:
        return Outcome(SOFT, f"could not capture the message: {_describe(exc)}",
                       host=capture.HOST, tried=[capture.HOST],
                       duration_ms=int((time.perf_counter() - started) * 1000))
    where = path or "the captured-mail inbox"
    return Outcome(SENT, f"captured (DELIVERY_RELAY=capture), not sent: {where}",
                   host=capture.HOST, code=250, output=f"captured in {where}", stage="done",
                   tried=[capture.HOST],
                   duration_ms=int((time.perf_counter() - started) * 1000))


def _classify(outcome: Outcome, code: int, reply, stage: str, what: str) -> None:
    outcome.code, outcome.output, outcome.stage = code, _text(reply), stage
    if 200 <= code < 300:
        outcome.status = SENT
        outcome.details = f"accepted by {outcome.host}: {code}"
    elif 500 <= code < 600:
        outcome.status = HARD
        outcome.details = f"{outcome.host} refused {what} permanently: {code} {outcome.output}"
        outcome.recipient_rejected = what != "the sender"
    else:
        outcome.status = SOFT
        outcome.details = f"{outcome.host} deferred {what}: {code} {outcome.output}"


def _open(host: str, port: int, outcome: Outcome) -> smtplib.SMTP:
    settings = get_settings()
    smtp = smtplib.SMTP(local_hostname=settings.smtp_hostname,
                        timeout=settings.delivery_timeout_seconds)
    smtp._host = host  # smtplib takes the TLS server name from here (SNI)
    try:
        code, reply = smtp.connect(host, port)
        if code != 220:
            raise smtplib.SMTPConnectError(code, reply)
        code, reply = smtp.ehlo()
        if not 200 <= code < 300:
            code, reply = smtp.helo()
            if not 200 <= code < 300:
                raise smtplib.SMTPHeloError(code, reply)
        if smtp.has_extn("starttls"):
            code, reply = smtp.starttls(context=_tls_context())
            if code == 220:
                outcome.tls = True
                smtp.ehlo()
    except (OSError, ValueError, smtplib.SMTPException) as exc:
        smtp.close()
        outcome.status, outcome.stage = SOFT, "connect"
        if isinstance(exc, smtplib.SMTPResponseException):
            outcome.code, outcome.output = exc.smtp_code, _text(exc.smtp_error)
        outcome.details = f"could not open a session with {outcome.host}: {_describe(exc)}"
        raise _NextHost() from None
    return smtp


def _converse(host: str, port: int, outcome: Outcome, *, mail_from: str, rcpt_to: str,
              data: bytes, before_data) -> None:
    cached = _take_cached(host, port)
    if cached is not None:
        smtp, outcome.tls, clean = cached
        try:
            # After a transaction that ended with the reply to its data the server has
            # already reset its state (RFC 5321 4.1.1.4); after one left half-way (a refused
            # recipient) RSET clears it. Either way nothing of this message was sent before
            # the session proved alive, so a dead one is safely replaced.
            code = 250 if clean else smtp.rset()[0]
            if code == 250:
                code, reply = smtp.mail(mail_from)
            else:
                code = 421
        except (OSError, smtplib.SMTPException):
            code, reply = 421, b"cached session lost"
        if code == 421:  # the server ended the idle session: start a fresh one
            smtp.close()
            cached = None
    if cached is None:
        outcome.tls = False
        smtp = _open(host, port, outcome)
        code = None
    broken = completed = False
    try:
        if code is None:
            code, reply = smtp.mail(mail_from)
        if code != 250:
            return _classify(outcome, code, reply, "envelope", "the sender")
        code, reply = smtp.rcpt(rcpt_to)
        if code not in (250, 251):
            return _classify(outcome, code, reply, "envelope", "the recipient")
        if before_data is not None:
            before_data(outcome.host)
        outcome.stage = "data"
        try:
            code, reply = smtp.data(data)
            completed = True
        except smtplib.SMTPDataError as exc:  # DATA itself refused (no 354)
            return _classify(outcome, exc.smtp_code, exc.smtp_error, "data", "the message")
        _classify(outcome, code, reply, "done" if 200 <= code < 300 else "data", "the message")
    except (OSError, smtplib.SMTPException) as exc:
        broken = True
        outcome.status = SOFT
        if outcome.stage == "connect":
            outcome.stage = "envelope"
        outcome.details = f"connection to {outcome.host} failed during the " \
                          f"{outcome.stage} stage: {_describe(exc)}"
    finally:
        # A session that answered (even a refusal) serves the next message; one
        # that failed or is closing (421) does not.
        if not broken and outcome.code is not None and outcome.code != 421:
            _put_cached(host, port, smtp, outcome.tls, completed)
        else:
            _close(smtp)


def _describe(exc: Exception) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{exc.smtp_code} {_text(exc.smtp_error)}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
