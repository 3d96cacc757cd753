"""Lines over 998 octets (RFC 5322 2.1.1) in a message someone else wrote: found, and made
short by transfer-encoding the parts that hold them.

A submission whose HTML or text part is one long line (many applications write HTML that
way) is not refused: before it is stored and signed, each MIME leaf part with such a line is
given a transfer encoding that keeps lines short, quoted-printable for text (still readable;
the standard library's codec) and base64 for anything else, with the email package (its
parser, ``email.encoders`` and its generator); the part's content is unchanged, and so is every other part and header, byte for
byte (the generator writes parsed headers back as they came). A long line that no transfer
encoding can shorten -- a header field, a multipart preamble -- is refused with
:class:`LineTooLong`, naming the limit. Mail received for a route is stored as it came and
goes through this only when it is sent on over SMTP (services/inbound/endpoints.py).
"""
from __future__ import annotations


from chalicelib.services.mime import transfer
from chalicelib.services.mime.base import MAX_LINE
from chalicelib.services.mime.checks import header_block_end


class LineTooLong(ValueError):
    """A line over 998 octets that re-encoding cannot shorten; ``str()`` says where."""


def longest_line(raw: bytes) -> int:
    """The length in octets of the longest line of ``raw`` (CRLF line endings)."""
    if len(raw) <= MAX_LINE:
        return len(raw)
    return max(map(len, raw.split(b"\r\n")))


def has_long_line(raw: bytes) -> bool:
    """Whether a line of ``raw`` (CRLF line endings) is over 998 octets: from each line
    start, the last LF within the next 1000 octets is where the next look starts (a dozen
    C-speed searches for 10 KB of ordinary lines, where splitting into lines cost ~30 µs)."""
    window = MAX_LINE + 2  # a line of 998 octets and its CRLF
    start, size = 0, len(raw)
    while size - start > window:
        found = raw.rfind(b"\n", start, start + window)
        if found < 0:
            return True
        start = found + 1
    return longest_line(raw[start:]) > MAX_LINE  # the last thousand octets at most


def shorten_lines(raw: bytes) -> bytes:
    """``raw`` (CRLF line endings) with no line over 998 octets: itself when it has none,
    else re-encoded as the module doc says. Raises LineTooLong."""
    if not has_long_line(raw):
        return raw
    end = header_block_end(raw)
    head_longest = longest_line(raw[:end])
    if head_longest > MAX_LINE:
        raise LineTooLong(f"a header line is {head_longest} octets long; RFC 5322 allows at "
                          f"most {MAX_LINE} (fold the field)")
    message = transfer.parse(raw)
    result = transfer.reencode(message, lambda wire: longest_line(
        wire[header_block_end(wire):]) > MAX_LINE)
    longest = longest_line(result)
    if longest > MAX_LINE:
        raise LineTooLong(f"a line outside any part's content is {longest} octets long; "
                          f"RFC 5322 allows at most {MAX_LINE}")
    return result
