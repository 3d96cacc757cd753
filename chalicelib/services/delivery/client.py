"""The sending SMTP client (outgoing mail; the receiving gateway is ``chalicelib/smtp/``): one
delivery attempt of one outgoing message over SMTP (no database in here).

``route(domain, egress)`` answers where the mail goes: nowhere when DELIVERY_RELAY is
``capture`` (kept in the captured-mail inbox, see capture.py); the IP pool's relay when the pool sends through
one (``egress.py``); DELIVERY_RELAY when set (``mx``: as when empty); else ``targets``: the
recipient domain's MX hosts in preference order (equal preferences shuffled), else the domain
itself when it has A/AAAA records but no MX (RFC 5321 5.1). A null MX (RFC 7505) or a domain
that does not exist is a permanent failure; a DNS timeout is a temporary one; a pool that
cannot send from here defers.

``send(...)`` walks the hosts in order until one of them answers the envelope: a host that
cannot be reached, or refuses the connection at the greeting, passes the message on to the
next. How a session is opened (the host resolved through DNS_RESOLVERS, the pool's source
address bound, EHLO with its name, STARTTLS) is ``connect.py``'s. An MTA-STS ``policy`` of the
recipient domain (``mta_sts.py``) decides the TLS: in ``enforce`` mode only MX hosts the policy
lists are tried, each over STARTTLS with a certificate valid for its name, else the message is
deferred with the reason; ``testing`` delivers as without a policy and reports what enforce
would have refused (logged, and in the attempt's details); ``none`` is no policy. Without one,
STARTTLS is used whenever offered, its certificate not checked (RFC 7435). ``before_data`` is
called right before the DATA command, so the caller can record that the end-of-data stage is
about to be reached (see attempt.py).

Connections are reused: after a session answered a message (accepted it, or refused it with
anything but 421), it stays open and the next message to the same host starts with MAIL FROM
on it (RSET first when the previous transaction was left half-way), as Postfix's connection
cache does. A paced delivery passes its destination's connection ``slot`` (sessions.py): the
session is the slot's, one per slot, kept across messages and the process's threads while
the slot is held or parked. Without a slot (a direct caller) sessions are kept per thread,
per host, pool and TLS requirement, at most IDLE_REUSE_SECONDS idle. A reused session found
dead (or answering 421) at RSET or at the envelope's first reply is replaced by a fresh
one; nothing of the new message had been delivered, so this is safe.

PIPELINING (RFC 2920, ``pipelining.py``): when the session offers it, MAIL, RCPT and DATA go
in one flight; ``before_data`` (the in-flight marker) then runs between the 354 and the
content. A refusal inside the flight is the reply to its own command (a refused recipient
is the recipient's refusal, whatever DATA answered); the session is kept and reset (RSET)
before its next message. A server that answers 354 although it refused every recipient,
and a ``before_data`` that raises after the 354, end the session (a lone "." would deliver
an empty message). Without PIPELINING each command waits for its reply, the marker right
before DATA.

What each transaction declares (issue 32) is ``declarations.py``'s, from the server's EHLO
features: ``BODY=8BITMIME``, ``SMTPUTF8``, ``SIZE=``; to a server without 8BITMIME an 8-bit
message goes as the ``downgrade`` callable converts it (``steps.seven_bit``: 7-bit, signed
again); a message the server cannot take (needs SMTPUTF8 it does not offer, larger than
its SIZE) is a HardFail before MAIL FROM whose reason says so (5.6.7, 5.3.4: a refusal of
the message, never of the address). Recipient domains are looked up as A-labels.

Outcomes: 2xx after DATA -> Sent; a 5xx to MAIL, RCPT or DATA -> HardFail; a 4xx, a dropped
connection, a timeout or no reachable host -> SoftFail.
"""
from __future__ import annotations

import random
import smtplib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from chalicelib.config import get_settings
from chalicelib import dns_lookup, observability, statuses
from chalicelib.services import mime
from chalicelib.services.delivery import (concurrency, connect, declarations, relay_report,
                                          sessions)
from chalicelib.services.delivery.connect import describe as _describe, text as _text
from chalicelib.services.delivery.egress import DIRECT, Egress, parse_relay

SENT, SOFT, HARD = statuses.SENT, statuses.SOFT_FAIL, statuses.HARD_FAIL
CAPTURE = ("capture", 0)  # DELIVERY_RELAY=capture: kept, never sent (delivery/capture.py)
__all__ = ["parse_relay"]  # re-exported: DELIVERY_RELAY's syntax


@dataclass
class Outcome:
    status: str                 # Sent, SoftFail, HardFail
    details: str
    host: str | None = None
    code: int | None = None
    output: str | None = None   # the remote server's reply text
    tls: bool = False
    tls_verified: bool = False  # the certificate was validated for the host's name
    mta_sts: str | None = None  # the recipient domain's MTA-STS mode that applied
    source_address: str | None = None  # the IP pool address bound
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


class Route(NamedTuple):
    hosts: list[tuple[str, int]]
    to_mx: bool = False       # the recipient domain's own MX hosts (MTA-STS applies)
    relayed: bool = False     # through the IP pool's relay


def route(domain: str, egress: Egress = DIRECT) -> Route:
    """Where a message to ``domain`` goes; raises TargetError when it cannot go now."""
    relay = configured_relay()
    if relay == CAPTURE:
        return Route([CAPTURE])
    if egress.blocked:
        raise TargetError(SOFT, egress.blocked)
    if egress.relay is not None:
        return Route([egress.relay], relayed=True)
    return Route(targets(domain), to_mx=relay is None)


def configured_relay() -> tuple[str, int] | None:
    """DELIVERY_RELAY: CAPTURE, a (host, port) or None (the MX hosts)."""
    relay = get_settings().delivery_relay.strip()
    if relay.lower() == "capture":
        return CAPTURE
    if relay and relay.lower() != "mx":
        return parse_relay(relay)
    return None


def targets(domain: str) -> list[tuple[str, int]]:
    """(host, port) pairs to try for ``domain``; raises TargetError when there are none."""
    relay = configured_relay()
    if relay is not None:
        return [relay]
    settings = get_settings()
    port = settings.delivery_mx_port
    lifetime = min(30.0, settings.delivery_timeout_seconds)
    try:  # issue 32: an internationalized domain is looked up as its A-label (IDNA 2008)
        domain = declarations.ascii_domain(domain)
    except declarations.BadDomain as exc:
        raise TargetError(HARD, str(exc), True) from None
    try:
        answer = dns_lookup.resolve(domain, "MX", lifetime, cached=True)
    except dns_lookup.NXDOMAIN:
        raise TargetError(HARD, f"the domain {domain} does not exist (NXDOMAIN)", True) from None
    except dns_lookup.NoAnswer:
        return [(_implicit_mx(domain, lifetime), port)]
    except dns_lookup.UNAVAILABLE as exc:
        raise TargetError(SOFT, f"DNS lookup of MX {domain} failed: {exc}") from None
    records = sorted(answer, key=lambda r: (r.preference, random.random()))
    hosts = [r.exchange.to_text(omit_final_dot=True) for r in records]
    hosts = [h for h in hosts if h not in ("", ".")]
    if not hosts:
        raise TargetError(HARD, f"{domain} publishes a null MX: it accepts no mail", True)
    return [(host, port) for host in hosts]


def _implicit_mx(domain: str, lifetime: float) -> str:
    for rdtype in ("A", "AAAA"):
        try:
            dns_lookup.resolve(domain, rdtype, lifetime, cached=True)
            return domain
        except (dns_lookup.NoAnswer, dns_lookup.NXDOMAIN):
            continue
        except dns_lookup.UNAVAILABLE as exc:
            raise TargetError(SOFT, f"DNS lookup of {domain} failed: {exc}") from None
    raise TargetError(HARD, f"{domain} has no MX, A or AAAA record", True)


IDLE_REUSE_SECONDS = 20.0
MAX_CACHED = 8
_cache = threading.local()


class _Cached(NamedTuple):
    session: connect.Session
    clean: bool      # the last transaction ended with the reply to its data
    since: float


def _take_cached(key: tuple) -> _Cached | None:
    conns: dict = getattr(_cache, "conns", {})
    entry = conns.pop(key, None)
    if entry is None:
        return None
    if time.monotonic() - entry.since > IDLE_REUSE_SECONDS:
        _close(entry.session.smtp)
        return None
    return entry


def _put_cached(key: tuple, session: connect.Session, clean: bool) -> None:
    conns: dict = _cache.__dict__.setdefault("conns", {})
    while len(conns) >= MAX_CACHED:
        _close(conns.pop(next(iter(conns))).session.smtp)
    conns[key] = _Cached(session, clean, time.monotonic())


_close = sessions.close


def close_cached() -> None:
    """Close this thread's cached sessions (tests, shutdown)."""
    conns: dict = getattr(_cache, "conns", {})
    while conns:
        _close(conns.popitem()[1].session.smtp)


class _NextHost(Exception):
    """This host could not take the message; try the next one."""


class _Stop(Exception):
    """A connect hook refused and said not to try another host."""


def send(hosts: list[tuple[str, int]], *, mail_from: str, rcpt_to: str, data: bytes,
         before_data: Callable[[str], None] | None = None, egress: Egress = DIRECT,
         policy=None, relayed: bool = False,
         downgrade: Callable[[bytes], bytes] | None = None, slot=None) -> Outcome:
    """Try ``hosts`` in order; returns the Outcome of the host that answered the envelope
    (or the last failure when none did). ``egress``: the IP pool's sources; ``policy``: the
    recipient domain's MTA-STS policy (``mta_sts.Policy``), for MX hosts; ``relayed``: the
    hosts are the IP pool's relay, whose report of the onward delivery the outcome takes;
    ``downgrade``: the 7-bit form of ``data`` for a server without 8BITMIME (None: sent as
    it is); ``slot``: the destination's connection slot (sessions.Slot) whose session to use."""
    started = time.perf_counter()
    if hosts == [CAPTURE]:
        return _capture(mail_from, rcpt_to, data, started)
    domain = rcpt_to.rpartition("@")[2].lower()
    mode = policy.mode if policy is not None and policy.mode != "none" else None
    tried: list[str] = []
    refusals: list[str] = []  # what an MTA-STS policy refused (enforce) or would have
    skipped: list[str] = []   # MX hosts an enforce policy does not list
    last = Outcome(SOFT, "no host to try")
    for host, port in hosts:
        label = f"{host}:{port}" if port != 25 else host
        if mode is not None and not policy.matches(host):
            if mode == "enforce":
                skipped.append(host)
                continue
            refusals.append(f"{host} is not an MX host the policy lists")
        tried.append(label)
        tls_mode = {"enforce": connect.REQUIRE, "testing": connect.REPORT}.get(
            mode, connect.OPPORTUNISTIC)
        outcome = Outcome(SOFT, "", host=label, mta_sts=policy.mode if policy else None)
        try:
            _converse(host, port, outcome, mail_from=mail_from, rcpt_to=rcpt_to, data=data,
                      before_data=before_data, egress=egress, tls_mode=tls_mode, domain=domain,
                      refusals=refusals, downgrade=downgrade, slot=slot)
        except _NextHost:
            last = outcome
            continue
        except _Stop:
            last = outcome
            break
        last = outcome
        break
    if skipped and not tried:
        last = Outcome(SOFT, f"the MTA-STS policy of {domain} (enforce) lists none of its MX "
                             f"hosts ({', '.join(skipped)}; it allows {policy.describe()}): "
                             "not sent", mta_sts=policy.mode)
    elif skipped and last.status != SENT:
        last.details += f" (not tried, not in the MTA-STS policy: {', '.join(skipped)})"
    if relayed:
        relay_report.apply(last)
    last.tried = tried
    last.duration_ms = int((time.perf_counter() - started) * 1000)
    if last.status == SOFT and last.stage == "connect" and len(tried) > 1:
        last.details = f"no host accepted a connection ({', '.join(tried)}): {last.details}"
    if refusals and mode == "testing":
        _report_testing(domain, last, refusals)
    return last


def _report_testing(domain: str, outcome: Outcome, refusals: list[str]) -> None:
    """Testing mode delivered anyway: say what enforce would have refused."""
    problems = "; ".join(refusals)
    outcome.details = f"{outcome.details}; MTA-STS policy of {domain} in testing mode, " \
                      f"enforce would have refused: {problems}"
    observability.log("delivery.mta_sts", "warning", domain=domain, mode="testing",
                      host=outcome.host, status=outcome.status, problems=problems)


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


def _classify(outcome: Outcome, code: int, reply, stage: str, what: str,
              domain: str = "") -> None:
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


def _open(host: str, port: int, outcome: Outcome, *, egress: Egress, tls_mode: str,
          domain: str) -> connect.Session:
    try:
        session = connect.open_session(host, port, egress=egress, tls_mode=tls_mode,
                                       domain=domain)
    except connect.Unreachable as exc:
        outcome.status, outcome.stage = SOFT, "connect"
        outcome.code, outcome.output = exc.code, exc.output
        outcome.details = exc.details
        raise (_NextHost if exc.next_host else _Stop)() from None
    return session


def _use(outcome: Outcome, session: connect.Session) -> None:
    outcome.tls, outcome.tls_verified = session.tls, session.verified
    outcome.source_address = session.source


def _declare(smtp, *, mail_from: str, rcpt_to: str, data: bytes,
             downgrade) -> tuple[declarations.Plan, bytes]:
    """Issue 32: what this transaction declares to the server (declarations.py), and the
    bytes to send (converted to 7-bit when the server lacks 8BITMIME)."""
    plan = declarations.plan(smtp.esmtp_features, data, mail_from=mail_from, rcpt_to=rcpt_to)
    if plan.convert and downgrade is not None:
        try:
            data = downgrade(data)
        except mime.NotConvertible as exc:
            return plan._replace(refusal=(
                "5.6.3 the recipient's server does not accept 8-bit data (no 8BITMIME) "
                f"and the message cannot be converted to 7-bit: {exc}")), data
        plan = declarations.plan(smtp.esmtp_features, data, mail_from=mail_from,
                                 rcpt_to=rcpt_to)
    return plan, data


def _converse(host: str, port: int, outcome: Outcome, *, mail_from: str, rcpt_to: str,
              data: bytes, before_data, egress: Egress, tls_mode: str, domain: str,
              refusals: list[str], downgrade=None, slot=None) -> None:
    key = (host, port, egress.key, tls_mode)
    if slot is not None:
        reused = slot.take(key)
    else:
        cached = _take_cached(key)
        reused = None if cached is None else (cached.session, cached.clean)
    session = None
    if reused is not None:
        session, clean = reused
        try:
            # After a transaction that ended with the reply to its data the server has
            # already reset its state (RFC 5321 4.1.1.4); after one left half-way (a refused
            # recipient) RSET clears it.
            if not clean and session.smtp.rset()[0] != 250:
                raise smtplib.SMTPServerDisconnected("RSET refused")
        except (OSError, smtplib.SMTPException):
            session.smtp.close()
            session = None
    common = dict(mail_from=mail_from, rcpt_to=rcpt_to, data=data, before_data=before_data,
                  downgrade=downgrade, domain=domain, refusals=refusals, key=key, slot=slot)
    if session is not None:
        try:
            _transaction(session, outcome, reused=True, **common)
            return
        except _Stale:  # the idle session was gone before anything of this message went
            session.smtp.close()
            outcome.code = outcome.output = None
            outcome.stage = "connect"
    session = _open(host, port, outcome, egress=egress, tls_mode=tls_mode, domain=domain)
    _transaction(session, outcome, reused=False, **common)


class _Stale(Exception):
    """A reused session answered the envelope's first command with 421 or was gone."""


def _transaction(session: connect.Session, outcome: Outcome, *, mail_from: str, rcpt_to: str,
                 data: bytes, before_data, downgrade, domain: str, refusals: list[str],
                 key: tuple, slot, reused: bool) -> None:
    _use(outcome, session)
    if session.problem:  # testing mode: a new session or a reused one, reported each time
        refusals.append(session.problem)
    smtp = session.smtp
    plan, payload = _declare(smtp, mail_from=mail_from, rcpt_to=rcpt_to, data=data,
                             downgrade=downgrade)
    if plan.refusal is not None:  # issue 32: this server cannot take this message
        outcome.status, outcome.stage = HARD, "envelope"
        outcome.details = f"not sent to {outcome.host}: {plan.refusal}"
        _keep(key, session, True, slot)  # nothing was said: the session is as it was
        raise _Stop()
    broken = completed = stale = abandoned = False
    try:
        if smtp.pipelining():
            completed = _pipelined(smtp, outcome, plan, payload, before_data, domain, reused)
            return
        try:
            code, reply = smtp.mail(plan.mail_from, plan.mail_options)
        except (OSError, smtplib.SMTPException):
            if reused:
                raise _Stale() from None
            raise
        if code == 421 and reused:
            raise _Stale()
        if code != 250:
            return _classify(outcome, code, reply, "envelope", "the sender", domain)
        code, reply = smtp.rcpt(plan.rcpt_to, plan.rcpt_options)
        if code not in (250, 251):
            return _classify(outcome, code, reply, "envelope", "the recipient", domain)
        if before_data is not None:
            before_data(outcome.host)
        outcome.stage = "data"
        try:
            code, reply = smtp.data(payload)
            completed = True
        except smtplib.SMTPDataError as exc:  # DATA itself refused (no 354)
            return _classify(outcome, exc.smtp_code, exc.smtp_error, "data", "the message",
                             domain)
        _classify(outcome, code, reply, "done" if 200 <= code < 300 else "data", "the message",
                  domain)
    except _Stale:
        stale = True  # the caller closes it and opens a fresh one
        raise
    except _Abandon:
        abandoned = True
    except (OSError, smtplib.SMTPException) as exc:
        broken = True
        outcome.status = SOFT
        if outcome.stage == "connect":
            outcome.stage = "envelope"
        outcome.details = f"connection to {outcome.host} failed during the " \
                          f"{outcome.stage} stage: {_describe(exc)}"
    except BaseException:
        # before_data raised (after a pipelined 354 the session is in its DATA state: a QUIT
        # would be read as content): the connection is dropped, nothing more said.
        abandoned = True
        raise
    finally:
        # A session that answered (even a refusal) serves the next message; one
        # that failed or is closing (421) does not.
        if stale:
            pass
        elif abandoned:
            smtp.close()
        elif not broken and outcome.code is not None and outcome.code != 421 and \
                smtp.sock is not None:
            _keep(key, session, completed, slot)
        else:
            _close(smtp)


class _Abandon(Exception):
    """The session was left in the DATA state without content: it is closed."""


def _pipelined(smtp, outcome: Outcome, plan: declarations.Plan, data: bytes, before_data,
               domain: str, reused: bool) -> bool:
    """MAIL, RCPT and DATA in one flight (as ``plan`` declares them); True when the
    transaction ended with the reply to the content (the session needs no RSET)."""
    asked = time.monotonic()
    try:
        (mail_code, mail_reply), rcpt, go_ahead = smtp.envelope(
            plan.mail_from, plan.rcpt_to, plan.mail_options, plan.rcpt_options)
        concurrency.saw_round_trip(domain, time.monotonic() - asked)  # (batch.py's split)
    except (OSError, smtplib.SMTPException):
        if reused:
            raise _Stale() from None
        raise
    rcpt_code, rcpt_reply = rcpt if rcpt is not None else (None, None)
    if mail_code == 421 and reused:
        raise _Stale()
    if mail_code == 250 and rcpt_code is None or \
            mail_code == 250 and rcpt_code in (250, 251) and go_ahead is None:
        if reused:  # nothing of the message went: a fresh session takes it at once
            raise _Stale()
        raise smtplib.SMTPServerDisconnected("connection closed during the envelope")
    if go_ahead is not None and go_ahead[0] == 354 and (
            mail_code != 250 or rcpt_code not in (250, 251)):
        # Told to send content for a transaction it refused: never send it (RFC 2920 3.1)
        _refusal(outcome, mail_code, mail_reply, rcpt_code, rcpt_reply, domain)
        raise _Abandon()
    if mail_code != 250 or rcpt_code not in (250, 251):
        _refusal(outcome, mail_code, mail_reply, rcpt_code, rcpt_reply, domain)
        return False
    if go_ahead[0] != 354:
        _classify(outcome, go_ahead[0], go_ahead[1], "data", "the message", domain)
        return False
    if before_data is not None:
        before_data(outcome.host)  # the in-flight marker: between the 354 and the content
    outcome.stage = "data"
    code, reply = smtp.content(data, go_ahead)
    _classify(outcome, code, reply, "done" if 200 <= code < 300 else "data", "the message",
              domain)
    return True


def _refusal(outcome: Outcome, mail_code: int, mail_reply, rcpt_code: int, rcpt_reply,
             domain: str) -> None:
    if mail_code != 250:
        _classify(outcome, mail_code, mail_reply, "envelope", "the sender", domain)
    else:
        _classify(outcome, rcpt_code, rcpt_reply, "envelope", "the recipient", domain)


def _keep(key: tuple, session: connect.Session, clean: bool, slot) -> None:
    if slot is not None:
        slot.keep(key, session, clean)
    else:
        _put_cached(key, session, clean)
