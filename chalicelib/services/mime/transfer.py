"""Giving a message's parts a 7-bit content transfer encoding, the one way both of its users
do it (``lines.py``: lines over 998 octets; ``seven_bit.py``: 8-bit octets for a server
without 8BITMIME): the message parsed and written back with its headers exactly as they came,
each leaf part that needs it re-encoded, text as quoted-printable (spaces left readable) and
anything else as base64 (RFC 2045 6.4, 6.7, 6.8), MIME-Version added when missing."""
from __future__ import annotations

import quopri
from email import encoders, policy as email_policy
from typing import Callable

from chalicelib.services.mime.checks import normalize_line_endings

# Parsed headers are written back exactly as they came (refold_source "none", 8-bit kept).
WRITE_BACK = email_policy.default.clone(linesep="\r\n", refold_source="none", cte_type="8bit")


def parse(raw: bytes):
    from email.parser import BytesParser  # not loaded at cold start

    return BytesParser(policy=WRITE_BACK).parsebytes(raw)


def written(part) -> bytes:
    """A message or part as it is sent: its own header block, then its content (CRLF)."""
    from email.generator import BytesGenerator
    from io import BytesIO

    out = BytesIO()
    BytesGenerator(out, mangle_from_=False, policy=WRITE_BACK).flatten(part)
    return normalize_line_endings(out.getvalue())


def reencode(message, needs: Callable[[bytes], bool]) -> bytes:
    """Re-encode each leaf part of ``message`` whose written form ``needs`` says must change;
    returns the whole message written."""
    for part in message.walk():
        if part.is_multipart() or not isinstance(part.get_payload(), str):
            continue
        if not needs(written(part)):
            continue
        data = part.get_payload(decode=True)
        del part["Content-Transfer-Encoding"]
        if part.get_content_maintype() == "text":
            # The standard library's codec (binascii), spaces left readable: the email
            # package's encode_quopri writes every space as =20.
            part.set_payload(quopri.encodestring(data).decode("ascii"))
            part["Content-Transfer-Encoding"] = "quoted-printable"
        else:
            part.set_payload(data)
            encoders.encode_base64(part)
    if "MIME-Version" not in message:  # a transfer encoding means MIME (RFC 2045 4)
        message["MIME-Version"] = "1.0"
    return written(message)
