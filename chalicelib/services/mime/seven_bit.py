"""A message with 8-bit content made 7-bit, for a server that does not offer 8BITMIME
(RFC 6152 3: a client must not send 8-bit data to it; it converts, as Postfix does).

Each MIME leaf part whose content holds 8-bit octets is given a 7-bit transfer encoding,
quoted-printable for text (still readable; the standard library's codec) and base64 for
anything else, with the email package (its parser, ``email.encoders`` and its generator);
a container (multipart, message/rfc822) that said ``8bit`` or ``binary`` then says ``7bit``
(RFC 2045 6.4). Every other part and header is written back as it came. The header block
must already be ASCII (a message with UTF-8 headers needs SMTPUTF8, which no conversion
gives); 8-bit octets outside any part's content (a preamble) cannot be converted:
:class:`NotConvertible`. The conversion happens before DKIM signing (the delivery steps sign
the converted bytes), so the signature covers what is sent.
"""
from __future__ import annotations

import quopri
from email import encoders, policy as email_policy

from chalicelib.services.mime.checks import header_block_end, normalize_line_endings

# Parsed headers are written back exactly as they came (as lines.py writes them).
_WRITE_BACK = email_policy.default.clone(linesep="\r\n", refold_source="none",
                                         cte_type="8bit")


class NotConvertible(ValueError):
    """The message has 8-bit octets that no transfer encoding can carry (headers, a
    multipart preamble or epilogue)."""


def to_seven_bit(raw: bytes) -> bytes:
    """``raw`` (CRLF line endings) with only 7-bit octets: itself when it has none, else
    converted as the module doc says. Raises NotConvertible."""
    if raw.isascii():
        return raw
    if not raw[:header_block_end(raw)].isascii():
        raise NotConvertible("the header block holds 8-bit octets (UTF-8 headers need "
                             "SMTPUTF8)")
    from email.generator import BytesGenerator  # not loaded at cold start
    from email.parser import BytesParser
    from io import BytesIO

    def written(part) -> bytes:
        out = BytesIO()
        BytesGenerator(out, mangle_from_=False, policy=_WRITE_BACK).flatten(part)
        return normalize_line_endings(out.getvalue())

    message = BytesParser(policy=_WRITE_BACK).parsebytes(raw)
    for part in message.walk():
        if part.is_multipart():
            if str(part.get("Content-Transfer-Encoding", "")).strip().lower() in (
                    "8bit", "binary"):
                part.replace_header("Content-Transfer-Encoding", "7bit")
            continue
        if not isinstance(part.get_payload(), str):
            continue
        if written(part).isascii():
            continue
        data = part.get_payload(decode=True)
        del part["Content-Transfer-Encoding"]
        if part.get_content_maintype() == "text":
            # binascii's codec, spaces left readable (encode_quopri writes each as =20)
            part.set_payload(quopri.encodestring(data).decode("ascii"))
            part["Content-Transfer-Encoding"] = "quoted-printable"
        else:
            part.set_payload(data)
            encoders.encode_base64(part)
    if "MIME-Version" not in message:  # a transfer encoding means MIME (RFC 2045 4)
        message["MIME-Version"] = "1.0"
    result = written(message)
    if not result.isascii():
        raise NotConvertible("8-bit octets outside any part's content (a multipart "
                             "preamble or epilogue)")
    return result
