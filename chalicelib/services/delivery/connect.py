"""Opening an SMTP session to one host: resolving it, choosing the source, greeting, TLS.

* **Resolution.** The host's A and AAAA records are looked up through DNS_RESOLVERS
  (``dns_lookup.getaddrinfo``; the system's resolver when it is empty) and the connection is
  made to an address we resolved, never by name: so the address and its family are ours to
  choose (IP pools), and a test zone's MX host needs to exist only in that zone. The host's
  name stays the TLS server name (SNI) and the name its certificate is checked against.
* **Source and greeting.** The destination's addresses are dialled in the order of the
  egress's families (``egress.py``), each from a source of its family: the pool's address
  bound before connecting, and EHLO with that address's hostname. An address that cannot be
  reached passes to the next one, then to the next host (the caller's loop).
* **TLS** (``tls_mode``): ``OPPORTUNISTIC``: STARTTLS whenever offered, the certificate not
  checked (RFC 7435: MX certificates rarely match, and a refusal would only push the mail to
  plain text). ``REQUIRE`` (an MTA-STS policy in enforce mode): STARTTLS must be offered and
  the certificate must chain to a trusted CA (MTA_STS_CA_BUNDLE, else the system's) and be
  valid for the host's name, else this host is not used. ``REPORT`` (testing mode): as
  REQUIRE, but a failure is only reported (``Session.problem``) and the session is opened
  again opportunistically.
"""
from __future__ import annotations

import errno
import smtplib
import socket
import ssl
import time
from dataclasses import dataclass

from chalicelib import dns_lookup
from chalicelib.config import get_settings
from chalicelib.services.delivery import concurrency, pipelining
from chalicelib.services.delivery.egress import Egress, Source

OPPORTUNISTIC, REPORT, REQUIRE = "opportunistic", "report", "require"
MAX_OUTPUT = 1000
# The IP pool's relay answers DATA only when the recipient's MX has answered it (DNS, the
# MTA-STS policy, each MX host's steps, DELIVERY_TIMEOUT_SECONDS apiece): the worker waits
# that many times longer for it, so a slow onward delivery is not cut off (and later resent).
RELAY_WAIT_FACTOR = 4


@dataclass
class Session:
    smtp: pipelining.Client
    address: str                 # the address dialled
    source: str | None           # the pool address it came from (None: the system's choice)
    tls: bool = False
    verified: bool = False       # the certificate was validated for the host's name
    problem: str | None = None   # REPORT mode: what an enforced policy would have refused


class Unreachable(Exception):
    """No session could be opened with the host. ``next_host``: whether the caller may try
    its next host (False: a connect hook refused and said not to)."""

    def __init__(self, details: str, code: int | None = None, output: str | None = None,
                 next_host: bool = True):
        super().__init__(details)
        self.details, self.code, self.output, self.next_host = details, code, output, next_host


class _SourceGone(Exception):
    """The source address could not be bound (no longer an address of this host)."""


def text(reply: bytes | str | None) -> str | None:
    """A reply as one line of text, at most MAX_OUTPUT characters."""
    if reply is None:
        return None
    if isinstance(reply, bytes):
        reply = reply.decode("utf-8", "replace")
    return reply.replace("\r", " ").replace("\n", " ")[:MAX_OUTPUT]


def describe(exc: Exception) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{exc.smtp_code} {text(exc.smtp_error)}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


_contexts: dict = {}


def tls_context(verify: bool) -> ssl.SSLContext:
    """Client contexts, built once per CA bundle: verifying (chain and host name) or not."""
    bundle = get_settings().mta_sts_ca_bundle if verify else None
    context = _contexts.get((verify, bundle))
    if context is None:
        context = ssl.create_default_context(cafile=bundle or None)
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        _contexts[(verify, bundle)] = context
    return context


def resolve(host: str, port: int) -> list[tuple[int, str]]:
    """(family, address) of ``host`` through DNS_RESOLVERS, in the resolver's order."""
    found: list[tuple[int, str]] = []
    for family, *_, sockaddr in dns_lookup.getaddrinfo(
            host, port, 0, socket.SOCK_STREAM, cached=True):
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr[0]) not in found:
            found.append((family, sockaddr[0]))
    return found


def open_session(host: str, port: int, *, egress: Egress, tls_mode: str,
                 domain: str) -> Session:
    """A greeted session with ``host`` (TLS as ``tls_mode`` asks); raises Unreachable."""
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError, *dns_lookup.FAILED) as exc:
        raise Unreachable(f"could not resolve {host}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    families = egress.families()
    problems: list[str] = [egress.no_source(f) + f" to reach {host} [{a}]"
                           for f, a in addresses if f not in families][:1]
    last: Unreachable | None = None
    for family in families:
        for address in (a for f, a in addresses if f == family):
            for source in egress.sources(family):
                try:
                    return _open(host, port, address, source, tls_mode, domain,
                                 RELAY_WAIT_FACTOR if egress.relay else 1)
                except _SourceGone:
                    problems.append(f"{source.address} is not an address of this host")
                    continue
                except Unreachable as exc:
                    if not exc.next_host:
                        raise
                    last = exc
                    problems.append(exc.details)
                    break  # this address is unreachable, whichever the source
    if not problems:
        problems.append(f"{host} has no address to dial")
    raise Unreachable("; ".join(problems), last.code if last else None,
                      last.output if last else None)


def _open(host: str, port: int, address: str, source: Source, tls_mode: str,
          domain: str, wait: float = 1) -> Session:
    settings = get_settings()
    smtp = pipelining.Client(local_hostname=source.hostname,
                        timeout=settings.delivery_timeout_seconds * wait,
                        source_address=(source.address, 0) if source.address else None)
    smtp._host = host  # smtplib takes the TLS server name from here (SNI, certificate check)
    session = Session(smtp, address, source.shown)
    shown = host if host == address else f"{host} [{address}]"
    try:
        code, reply = smtp.connect(address, port)
        if code != 220:
            raise smtplib.SMTPConnectError(code, reply)
        asked = time.monotonic()
        code, reply = smtp.ehlo()
        concurrency.saw_round_trip(domain, time.monotonic() - asked)  # (batch.py's split)
        if not 200 <= code < 300:
            code, reply = smtp.helo()
            if not 200 <= code < 300:
                raise smtplib.SMTPHeloError(code, reply)
        if tls_mode == OPPORTUNISTIC:
            if smtp.has_extn("starttls") and smtp.starttls(context=tls_context(False))[0] == 220:
                session.tls = True
                smtp.ehlo()
            return session
        if not smtp.has_extn("starttls"):
            raise _TLSProblem(f"{host} does not offer STARTTLS")
        code, reply = smtp.starttls(context=tls_context(True))
        if code != 220:
            raise _TLSProblem(f"{host} refused STARTTLS: {code} {text(reply)}")
        session.tls = session.verified = True
        smtp.ehlo()
        return session
    except _TLSProblem as exc:
        smtp.close()
        return _tls_failed(host, port, address, source, tls_mode, domain, exc.details, wait)
    except ssl.SSLCertVerificationError as exc:
        smtp.close()
        return _tls_failed(host, port, address, source, tls_mode, domain,
                           f"{host}'s certificate is not valid for {host} "
                           f"({exc.verify_message or exc.reason})", wait)
    except (OSError, ValueError, smtplib.SMTPException) as exc:
        smtp.close()
        if isinstance(exc, OSError) and exc.errno == errno.EADDRNOTAVAIL and source.address:
            raise _SourceGone() from None
        code = output = None
        if isinstance(exc, smtplib.SMTPResponseException):
            code, output = exc.smtp_code, text(exc.smtp_error)
        raise Unreachable(f"could not open a session with {shown}: {describe(exc)}",
                          code, output) from None


class _TLSProblem(Exception):
    def __init__(self, details: str):
        super().__init__(details)
        self.details = details


def _tls_failed(host, port, address, source, tls_mode, domain, problem: str,
                wait: float) -> Session:
    """REQUIRE: this host is not used. REPORT: note it and open the session again without
    checking the certificate (testing mode delivers anyway)."""
    if tls_mode == REQUIRE:
        raise Unreachable(f"{problem}: the recipient domain's MTA-STS policy (enforce) "
                          "requires STARTTLS with a valid certificate")
    session = _open(host, port, address, source, OPPORTUNISTIC, domain, wait)
    session.problem = problem
    return session
