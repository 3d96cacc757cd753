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

from chalicelib.services.mime import transfer
from chalicelib.services.mime.checks import header_block_end


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
    message = transfer.parse(raw)
    for part in message.walk():
        if part.is_multipart() and str(part.get("Content-Transfer-Encoding", "")).strip() \
                .lower() in ("8bit", "binary"):
            part.replace_header("Content-Transfer-Encoding", "7bit")
    result = transfer.reencode(message, lambda wire: not wire.isascii())
    if not result.isascii():
        raise NotConvertible("8-bit octets outside any part's content (a multipart "
                             "preamble or epilogue)")
    return result
