"""What the sending client declares to the receiving server, and how it writes the envelope:
the SMTP extensions a message needs (RFC 6152 ``8BITMIME``, RFC 6531 ``SMTPUTF8``, RFC 1870
``SIZE``) and internationalized domain names as A-labels (RFC 5890, IDNA 2008). Pure
decisions: no I/O, no database, no SMTP library.

Contract (for every SMTP client that delivers, whichever carries the conversation)::

    from chalicelib.services.delivery import declarations

    plan = declarations.plan(features, data, mail_from=..., rcpt_to=...)

``features``: the server's EHLO keywords, lower-cased, each with its parameter text
(smtplib's ``SMTP.esmtp_features`` as it is; ``{}`` after HELO). ``data``: the bytes about to
be sent (signed). The ``Plan``:

* ``refusal``: not None when this message cannot go to this server at all; do not send MAIL
  FROM; the attempt is a permanent failure (HardFail) with this text as its reason. It
  starts with the enhanced status it stands for (``5.6.7``: the message needs SMTPUTF8 and
  the server does not offer it, RFC 6531 3.4; ``5.3.4``: larger than the server's SIZE),
  so the failures taxonomy (``failures.classify``) reads it as a refusal of the message,
  never of the address: the recipient is not suppressed.
* ``convert``: the data holds 8-bit octets and the server does not offer 8BITMIME: send
  instead the 7-bit form of the message (``steps.seven_bit``: the 8-bit parts
  quoted-printable or base64, ``mime.to_seven_bit``, then DKIM-signed again), and ``plan``
  again with those bytes. A client without a converter sends ``data`` as it is.
* ``mail_from``, ``mail_options``: ``MAIL FROM:<mail_from> <options>`` (``BODY=8BITMIME``
  when the data has 8-bit octets, ``SMTPUTF8`` when the message needs it, ``SIZE=<n>`` when
  the server offers SIZE).
* ``rcpt_to``, ``rcpt_options``: ``RCPT TO:<rcpt_to> <options>``. Without SMTPUTF8 the
  addresses' domains are written as A-labels (an ASCII local part at an IDN domain needs no
  SMTPUTF8); with it, as given.

Whether a message needs SMTPUTF8 is the one rule of ``mime.needs_smtputf8``: its header
block or an envelope address (sender or recipient, domains taken as A-labels) is not ASCII.
DNS lookups of a recipient domain use ``ascii_domain`` (``client.targets``).
"""
from __future__ import annotations

from typing import NamedTuple

from chalicelib.services import mime

BODY_8BITMIME = "BODY=8BITMIME"
SMTPUTF8 = "SMTPUTF8"


class Plan(NamedTuple):
    mail_from: str
    rcpt_to: str
    mail_options: tuple[str, ...] = ()
    rcpt_options: tuple[str, ...] = ()
    convert: bool = False        # 8-bit data, no 8BITMIME: send the 7-bit form instead
    refusal: str | None = None   # not sendable to this server: a permanent failure


class BadDomain(ValueError):
    """A domain name that has no A-label form (not a valid IDNA 2008 name)."""


def ascii_domain(domain: str) -> str:
    """``domain`` as DNS and a server without SMTPUTF8 take it: an internationalized name's
    A-label form (IDNA 2008 with the UTS #46 mapping, as browsers and email_validator use);
    an ASCII one as it is. Raises BadDomain."""
    if domain.isascii():
        return domain
    import idna  # email_validator's own dependency, pinned

    try:
        return idna.encode(domain.rstrip("."), uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise BadDomain(f"{domain} is not a valid internationalized domain name: "
                        f"{exc}") from None


def ascii_address(address: str) -> str:
    """``address`` with its domain as an A-label (the local part untouched); as given when
    the domain has no A-label form (the address is then simply not ASCII)."""
    local, at, domain = address.rpartition("@")
    if not at or domain.isascii():
        return address
    try:
        return f"{local}@{ascii_domain(domain)}"
    except BadDomain:
        return address


def _size_limit(features: dict) -> int | None:
    """The server's fixed maximum message size (RFC 1870: no number, or 0, means none)."""
    if "size" not in features:
        return None
    value = (features.get("size") or "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def plan(features: dict, data: bytes, *, mail_from: str, rcpt_to: str) -> Plan:
    """The envelope and declarations for ``data`` to a server with EHLO ``features``."""
    sender, recipient = ascii_address(mail_from), ascii_address(rcpt_to)
    utf8 = mime.needs_smtputf8(data, sender, recipient)
    if utf8 and "smtputf8" not in features:
        return Plan(mail_from, rcpt_to, refusal=(
            "5.6.7 the recipient's server does not support internationalized mail: the "
            "message needs SMTPUTF8 (RFC 6531: UTF-8 in its headers or addresses) and the "
            "server does not offer it"))
    eight_bit = not data.isascii()
    if eight_bit and "8bitmime" not in features and not utf8:
        return Plan(sender, recipient, convert=True)
    options: list[str] = []
    if eight_bit:
        # A server offering SMTPUTF8 offers 8BITMIME too (RFC 6531 3.1); UTF-8 headers
        # are 8-bit data.
        options.append(BODY_8BITMIME)
    if utf8:
        options.append(SMTPUTF8)
    limit = _size_limit(features)
    if limit is not None and len(data) > limit:
        return Plan(mail_from, rcpt_to, refusal=(
            f"5.3.4 the message is {len(data)} octets, larger than the {limit} the "
            "recipient's server accepts (its SIZE)"))
    if "size" in features:
        options.append(f"SIZE={len(data)}")
    if utf8:
        return Plan(mail_from, rcpt_to, tuple(options))
    return Plan(sender, recipient, tuple(options))
