"""The Received trace field the gateway puts at the top of every message it takes (RFC 5321
4.4: an SMTP server MUST), inbound mail and submissions alike, written by one function.

``Received: from <EHLO name> [([<client address>])] by <SMTP_HOSTNAME> with <protocol>
[tls <cipher suite>]; <date>``

* The protocol is the registered "with" keyword (RFC 3848, RFC 6531 3.7.3): ESMTP, plus S
  when the session is TLS and A when the client authenticated with AUTH; UTF8SMTP… when
  the client declared SMTPUTF8; SMTP after HELO.
* ``tls``: the TLS cipher suite by its IANA name, the Received clause RFC 8314 registers;
  left out when the name is not known.
* **Submissions leave out the client's address.** RFC 5321 asks the From clause for the
  EHLO name (MUST) and the address literal only as a SHOULD. For an authenticated submission
  the client is a tenant's application server: every recipient of every message would learn
  its address, which tells nothing a receiver needs (the message is accountable through its
  DKIM signature and its return path), and which submission services commonly leave out.
  Inbound mail, from other servers, keeps it. No ``for`` clause: with one copy per recipient it would be harmless, but a Bcc
  recipient's copy must never name anyone, itself included, that the others' do not.
"""
from __future__ import annotations

import re
from typing import NamedTuple
from email.utils import formatdate

from chalicelib import clock

#: OpenSSL's names of the TLS 1.2 suites a default server context offers, by their IANA
#: names (TLS 1.3 suites are called by their IANA names already).
_IANA_SUITES = {
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-AES256-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384",
    "ECDHE-RSA-AES256-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
    "ECDHE-ECDSA-AES128-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "ECDHE-RSA-AES128-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "DHE-RSA-AES256-GCM-SHA384": "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
    "DHE-RSA-AES128-GCM-SHA256": "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
    "DHE-RSA-AES256-SHA256": "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256",
    "DHE-RSA-AES128-SHA256": "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256",
}
# What an EHLO name may hold in the field: a domain or an address literal's characters.
_NOT_NAME = re.compile(r"[^A-Za-z0-9.\-\[\]:_]")


class Trace(NamedTuple):
    """What the Received field says about one SMTP transaction (plain data: it travels to
    the committer process with the message; a tuple pickles in a third of a dataclass's
    time)."""

    helo: str | None
    client_ip: str | None  # None: not shown (submissions)
    hostname: str
    esmtp: bool
    tls_cipher: str | None  # None: not TLS; "" TLS with an unknown suite name
    authenticated: bool
    smtputf8: bool
    timestamp: float  # when the message was received (the service's clock)

    @property
    def protocol(self) -> str:
        base = ("UTF8SMTP" if self.smtputf8 else "ESMTP") if self.esmtp else "SMTP"
        suffix = ("S" if self.tls_cipher is not None else "") + ("A" if self.authenticated
                                                                 else "")
        return base + suffix if self.esmtp else base


def tls_cipher(transport) -> str | None:
    """The IANA name of the session's TLS cipher suite, "" when TLS with a suite this does
    not name, None without TLS."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    cipher = ssl_object.cipher()
    name = cipher[0] if cipher else ""
    return name if name.startswith("TLS_") else _IANA_SUITES.get(name, "")


def now() -> float:
    return clock.timestamp()  # the service's clock, as a number (a datetime costs 3 µs more)


_last_date: tuple[int, str] = (-1, "")


def _date(timestamp: float) -> str:
    """The RFC 5322 date of ``timestamp`` (whole seconds), made once a second: a busy
    gateway writes hundreds of fields with the same one."""
    global _last_date
    second = int(timestamp)
    known = _last_date
    if known[0] != second:
        known = _last_date = (second, formatdate(second, usegmt=True))
    return known[1]


def received(trace: Trace) -> bytes:
    """The Received field (with its CRLF) for ``trace``."""
    helo = _NOT_NAME.sub("", trace.helo or "")[:100] or "unknown"
    source = f"{helo} ([{trace.client_ip}])" if trace.client_ip else helo
    tls = f" tls {trace.tls_cipher}" if trace.tls_cipher else ""
    field = (f"Received: from {source}\r\n\tby {trace.hostname} with {trace.protocol}{tls};"
             f"\r\n\t{_date(trace.timestamp)}\r\n")
    return field.encode("ascii", "replace")
