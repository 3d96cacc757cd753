"""The gateway's aiosmtpd handler: a thin adapter over the services.

* AUTH PLAIN / LOGIN: the password is an SMTP credential's key (any user name). Failures are
  counted per client address (smtp/ratelimit.py): each one slows the answer, and past the
  limit AUTH is refused for the window.
* EHLO: aiosmtpd's extensions plus PIPELINING and ENHANCEDSTATUSCODES.
* MAIL FROM: a client that did not authenticate may still be an SMTP-IP credential's address.
  A non-ASCII address needs SMTPUTF8 on MAIL FROM (553 5.6.7), at MAIL and RCPT alike.
* RCPT TO: authenticated clients submit to anyone, each recipient validated here (553
  5.1.3), once; for everybody else the inbound service decides which recipients are accepted
  (services/inbound/classify.py) and this handler only turns its refusals into replies: the
  gateway is never an open relay.
* DATA: submissions go through the same submission service as the HTTP API, with the
  Received field (trace.py) and whether the client declared SMTPUTF8; other mail goes
  to the inbound service (routes, bounces, complaints, unsubscribes) or, at a domain's
  DMARC report address, to services/dmarc/.
Database work runs in a thread pool, never on the event loop; DATA is parsed in the group
committer's prepare thread and committed by the committer (smtp/commit.py).
"""
from __future__ import annotations

import asyncio
import binascii
import logging
from base64 import b64decode
from concurrent.futures import Executor

from aiosmtpd.smtp import MISSING, AuthResult

from chalicelib import errors, observability
from chalicelib.config import get_settings
from chalicelib.db import session_scope, tenancy
from chalicelib.services.inbound import classify, receive as inbound
from chalicelib.services.inbound.classify import Refusal
from chalicelib.services.inbound.routes import RouteMatch
from chalicelib.services import mime
from chalicelib.smtp import auth
from chalicelib.smtp.commit import GroupCommitter, GroupUnit
from chalicelib.smtp.ratelimit import AuthFailureLimiter
from chalicelib.smtp.recipients import RouteCache
from chalicelib.smtp.trace import Trace, received, tls_cipher, now as trace_now

log = logging.getLogger(__name__)

TEMPORARY = "451 4.3.0 Temporary failure; please try again later"
NO_RELAY = "530 5.7.0 Authentication required: relaying is not allowed"
UNKNOWN_MAILBOX = "550 5.1.1 Mailbox unavailable: no route for this address"
UNKNOWN_RETURN_PATH = "550 5.1.1 Mailbox unavailable: no message with this return path"
REJECTED = "550 5.7.1 Delivery refused by the recipient's route"
BOUNCED = "550 5.1.1 Recipient refused by the route (mode bounce)"
UNKNOWN_UNSUBSCRIBE = "550 5.1.1 Mailbox unavailable: no message with this unsubscribe address"
UNKNOWN_DMARC = "550 5.1.1 Mailbox unavailable: no domain with this DMARC report address"
REPLIES = {Refusal.NO_RELAY: NO_RELAY, Refusal.UNKNOWN_MAILBOX: UNKNOWN_MAILBOX,
           Refusal.UNKNOWN_RETURN_PATH: UNKNOWN_RETURN_PATH, Refusal.REJECTED: REJECTED,
           Refusal.UNKNOWN_UNSUBSCRIBE: UNKNOWN_UNSUBSCRIBE,
           Refusal.UNKNOWN_DMARC: UNKNOWN_DMARC}
# RFC 6531 3.5: a non-ASCII address in a transaction that did not declare SMTPUTF8.
NEEDS_SMTPUTF8 = ("553 5.6.7 Internationalized (non-ASCII) address: declare SMTPUTF8 on MAIL "
                  "FROM to use it (RFC 6531)")
BAD_UTF8_SENDER = "553 5.1.7 The sender address is not valid UTF-8"
# Refusals about who the message claims to be from: 550 5.7.1 (not authorized), not 554.
ORIGINATOR_FIELDS = ("from", "sender", "resent-from", "resent-sender")

def _one_line(text: str, limit: int = 400) -> str:
    """``text`` as one line of a reply (no surrogate escapes of undecodable bytes)."""
    text = str(text).encode("utf-8", "replace").decode("utf-8")
    return " ".join(text.split())[:limit]


def _valid_text(text: str) -> bool:
    """False when aiosmtpd's UTF-8 decoding left surrogate escapes (the bytes were not
    UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class GatewayHandler:
    def __init__(self, executor: Executor, limiter: AuthFailureLimiter,
                 committer: GroupCommitter):
        self.executor = executor
        self.limiter = limiter
        self.committer = committer
        self.routes = RouteCache()

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # --- AUTH ----------------------------------------------------------------------------

    async def _read_blob(self, server, args: list[str], index: int, challenge: str):
        if len(args) > index:
            try:
                return b64decode(args[index].encode(), validate=True)
            except binascii.Error:
                await server.push("501 5.5.2 Can't decode base64")
                return None
        blob = await server.challenge_auth(challenge)
        return None if blob is MISSING else blob

    async def auth_PLAIN(self, server, args: list[str]) -> AuthResult:
        blob = await self._read_blob(server, args, 1, "")
        if blob is None:
            return AuthResult(success=False, handled=True)
        parts = blob.split(b"\x00")
        if len(parts) != 3:
            await server.push("501 5.5.2 Can't split auth value")
            return AuthResult(success=False, handled=True)
        return await self._check(server, parts[2])

    async def auth_LOGIN(self, server, args: list[str]) -> AuthResult:
        if await self._read_blob(server, args, 1, "User Name") is None:
            return AuthResult(success=False, handled=True)
        password = await self._read_blob(server, [], 1, "Password")
        if password is None:
            return AuthResult(success=False, handled=True)
        return await self._check(server, password)

    async def _check(self, server, password: bytes) -> AuthResult:
        client = server.session.peer[0]
        try:
            key = password.decode("utf-8")
        except UnicodeDecodeError:
            key = ""
        try:
            outcome = await self._run(auth.authenticate, self.limiter, client, key)
            if outcome.counts_as_failure:
                observability.log("smtp.auth_failed", "warning", client_ip=client,
                                  reply=outcome.reply)
                await asyncio.sleep(await self._run(self.limiter.record_failure, client))
        except Exception:  # noqa: BLE001
            log.exception("AUTH lookup failed")
            return AuthResult(success=False, handled=False, message=auth.TEMPORARY_FAILURE)
        if outcome.identity is not None:
            return AuthResult(success=True, auth_data=outcome.identity)
        return AuthResult(success=False, handled=False, message=outcome.reply)

    # --- EHLO ----------------------------------------------------------------------------

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        """aiosmtpd's EHLO lines with PIPELINING (commands sent together are read and
        answered in order) and ENHANCEDSTATUSCODES (every reply has one: replies.py)."""
        session.host_name = hostname  # what aiosmtpd does itself when no hook is set
        return [responses[0], "250-PIPELINING", *responses[1:-1], "250-ENHANCEDSTATUSCODES",
                responses[-1]]

    # --- envelope ------------------------------------------------------------------------

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if not address.isascii():  # aiosmtpd decoded it as UTF-8 (surrogates where not)
            if not envelope.smtp_utf8:
                return NEEDS_SMTPUTF8
            if not _valid_text(address):
                return BAD_UTF8_SENDER
        identity = session.auth_data if session.authenticated else None
        if identity is None:
            if not getattr(session, "ip_checked", False):
                try:
                    session.ip_identity = await self._run(auth.check_ip, session.peer[0])
                except Exception:  # noqa: BLE001
                    log.exception("SMTP-IP lookup failed")
                    return TEMPORARY
                session.ip_checked = True
            identity = getattr(session, "ip_identity", None)
            if identity is not None and await self._run(auth.server_suspended, identity.server_id):
                return auth.SUSPENDED
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        envelope.identity = identity
        envelope.targets = {}
        return "250 2.1.0 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if len(envelope.rcpt_tos) >= get_settings().smtp_max_recipients:
            return "452 4.5.3 Too many recipients"
        if not address.isascii() and not envelope.smtp_utf8:
            return NEEDS_SMTPUTF8
        if getattr(envelope, "identity", None) is not None or not address.isascii():
            # A submission's recipient is checked here, once (memoised; the message's
            # parsing trusts it): refused now, never after DATA. An internationalized one
            # inbound: its domain as the A-label the routes and return paths are kept by.
            try:
                address = mime.parse_address(address, "rcpt_to").email
            except mime.InvalidField as exc:
                return f"553 5.1.3 The recipient address {_one_line(exc.message, 300)}"
        if getattr(envelope, "identity", None) is None:
            seconds = get_settings().smtp_route_cache_seconds
            target = self.routes.get(address, seconds)
            if target is None:
                try:
                    reply, target = await self._run(self._resolve, address)
                except Exception:  # noqa: BLE001
                    log.exception("route lookup failed")
                    return TEMPORARY
                if target is None:
                    return reply
                if isinstance(target, RouteMatch):
                    self.routes.put(address, target, seconds)
            envelope.targets[address] = target
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 2.1.5 OK"

    @staticmethod
    def _resolve(address: str):
        """(refusal reply, None) or (None, target) for an unauthenticated recipient."""
        with session_scope() as db:
            refusal, target = classify.classify(db, address)
        return (REPLIES[refusal] if refusal is not None else None), target

    # --- DATA ----------------------------------------------------------------------------

    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or b""
        identity = getattr(envelope, "identity", None)
        try:
            trace = self._trace(server, session, envelope, identity)
            if identity is not None:  # its Received field is written with the parsing
                unit = SubmitUnit(identity.server_id, list(envelope.rcpt_tos), raw, trace,
                                  envelope.smtp_utf8)
            else:
                unit = self._receive_unit(envelope.mail_from, list(envelope.rcpt_tos),
                                          dict(envelope.targets), received(trace) + raw)
                if isinstance(unit, DmarcUnit):  # a large report would hold up the prepare
                    await self._run(unit.prepare)  # thread's other messages: in the pool
            # Parsed in the committer's prepare thread, which then queues it for the
            # committer: not in the committer thread, where it would hold up every message
            # of the batch, nor on the loop, where it held up every connection (bench_smtp
            # A/B: 35-146/s against 172-215/s through the pool). The loop is woken once.
            return await asyncio.wrap_future(self.committer.submit(unit))
        except errors.ServiceError as exc:
            return self._refusal(exc)
        except Exception:  # noqa: BLE001  (never lose the client without an answer)
            log.exception("DATA handling failed")
            if identity is None:  # a cached route may be gone: look it up again next time
                self.routes.forget(envelope.rcpt_tos)
            return TEMPORARY

    @staticmethod
    def _refusal(exc: errors.ServiceError) -> str:
        if isinstance(exc, errors.ServerSuspended):
            return auth.SUSPENDED
        if isinstance(exc, errors.SendLimitExceeded):  # temporary: the window will reset
            return "451 4.7.1 " + _one_line(exc.message)
        if isinstance(exc, errors.PayloadTooLarge):
            return "552 5.3.4 " + _one_line(exc.message)
        if isinstance(exc, (errors.ValidationError, errors.ParameterMissing)):
            code = "550 5.7.1" if exc.field in ORIGINATOR_FIELDS else "554 5.6.0"
            return f"{code} {_one_line(exc.message)}"
        return "554 5.7.1 " + _one_line(exc.message)

    @staticmethod
    def _trace(server, session, envelope, identity) -> Trace:
        """The Received field's facts (trace.py): a submission's without the client's
        address. The TLS cipher is the session's (aiosmtpd makes a new session after
        STARTTLS), looked up once."""
        cipher = getattr(session, "tls_cipher", False)
        if cipher is False:
            cipher = session.tls_cipher = tls_cipher(server.transport)
        return Trace(helo=session.host_name,
                     client_ip=None if identity is not None or not session.peer
                     else session.peer[0],
                     hostname=server.hostname, esmtp=session.extended_smtp,  # SMTP_HOSTNAME
                     tls_cipher=cipher, authenticated=bool(session.authenticated),
                     smtputf8=envelope.smtp_utf8, timestamp=trace_now())

    @staticmethod
    def _receive_unit(mail_from: str, rcpt_tos: list[str], targets: dict, raw: bytes):
        matches = classify.route_matches(rcpt_tos, targets)
        if matches and len(matches) == len(rcpt_tos):
            return InboundUnit(inbound.Received(mail_from, matches, raw))
        reports = [targets.get(r) for r in rcpt_tos]
        if all(isinstance(t, classify.DmarcReport) for t in reports):
            return DmarcUnit(mail_from, sorted(set(reports)), raw)
        # (CRLF line ends only: the gateway's reader wrote them, lines.py)

        def unit(db) -> str:
            refused = classify.receive(db, mail_from=mail_from, rcpt_tos=rcpt_tos,
                                       targets=targets, raw=raw)
            return BOUNCED if refused else "250 2.0.0 OK"
        return unit


class SubmitUnit(GroupUnit):
    """A submission for the group committer: MIME checks before the transaction, then every
    submission of the batch for the same server stored together (submission.submit_parsed_many:
    one From lookup per domain, multi-row INSERTs, one counter upsert, wake-ups after commit).
    The envelope sender is only informative (the pipeline sets its own return path)."""

    def __init__(self, server_id: int, rcpt_tos: list[str], raw: bytes, trace: Trace,
                 smtputf8: bool):
        self.group = server_id
        self.rcpt_tos = rcpt_tos  # as parse_address wrote them at RCPT TO
        self.raw = raw
        self.trace = trace
        self.smtputf8 = smtputf8
        self.parsed = None

    def prepare(self) -> None:
        from chalicelib.services.sending import submission

        if self.parsed is None:
            self.parsed = submission.parse_raw(rcpt_to=self.rcpt_tos, raw=self.raw,
                                               received=received(self.trace),
                                               smtputf8=self.smtputf8, checked=True,
                                               crlf=True)
            self.raw = b""  # keep one copy

    @classmethod
    def run_group(cls, db, units: list["SubmitUnit"]) -> list[object]:
        from chalicelib.services.sending import submission

        tenancy.act(db, tenancy.for_server(units[0].group))  # the AUTH credential's server
        results = submission.submit_parsed_many(db, units[0].group, [u.parsed for u in units],
                                                source="smtp")
        return [r if isinstance(r, Exception) else f"250 2.0.0 OK queued as {r['message_id']}"
                for r in results]


class InboundUnit(GroupUnit):
    """Mail whose every recipient is an inbound route's address: headers read before the
    transaction, then every such mail of the batch stored together (inbound.receive_many:
    per server, one statement on PostgreSQL). Mail also addressed to a return path, an
    unsubscribe or a feedback address goes through the plain unit instead."""

    group = "inbound"

    def __init__(self, mail: inbound.Received):
        self.mail = mail
        self.ready = False

    def prepare(self) -> None:
        if not self.ready:  # its line ends are CRLF already (the gateway's reader, lines.py)
            self.mail.read_headers()
            self.ready = True

    @classmethod
    def run_group(cls, db, units: list["InboundUnit"]) -> list[object]:
        # The servers of the routes found at RCPT ("inbound-mail", services/inbound/classify).
        tenancy.act(db, tenancy.for_servers(m.server_id for u in units for m in u.mail.matches))
        inbound.receive_many(db, [u.mail for u in units])
        return [BOUNCED if all(m.mode == "bounce" for m in u.mail.matches) else "250 2.0.0 OK"
                for u in units]


class DmarcUnit(GroupUnit):
    """A DMARC aggregate report mailed to report addresses only: read (unpacked, parsed,
    within its limits) before the transaction, so a refusal (554) refuses this mail alone
    and a large report never holds up the batch; stored in it."""

    group = "dmarc"

    def __init__(self, mail_from: str, addresses: list[classify.DmarcReport], raw: bytes):
        self.mail_from = mail_from
        self.addresses = addresses
        self.raw = raw
        self.report: dict | None = None

    def prepare(self) -> None:
        from chalicelib.services.dmarc import intake

        if self.report is None:
            self.report = intake.read(self.raw, mail_from=self.mail_from)
            self.raw = b""

    @classmethod
    def run_group(cls, db, units: list["DmarcUnit"]) -> list[object]:
        from chalicelib.services.dmarc import intake

        # The servers of the report addresses' domains found at RCPT ("inbound-mail").
        tenancy.act(db, tenancy.for_servers(a.server_id for u in units for a in u.addresses))
        results: list[object] = []
        for unit in units:
            try:  # every address checked before anything is written
                for address in unit.addresses:
                    intake.accepting_domain(db, address.domain_id, unit.report,
                                            mail_from=unit.mail_from)
            except errors.ValidationError as exc:
                results.append(exc)
                continue
            for address in unit.addresses:
                intake.store(db, address.domain_id, unit.report, mail_from=unit.mail_from)
            results.append("250 2.0.0 OK")
        return results
