"""Reply codes in text: the enhanced status code (RFC 3463, ``5.1.1``) and the basic SMTP reply
code (RFC 5321, ``550``), as they appear in replies, DSN fields and the human-readable text of
bounces. The one place these patterns are written."""
from __future__ import annotations

import re

# Not a piece of a dotted IP address or version ("10.5.1.1", "4.4.1.2"). The shape for the
# given classes; ENHANCED (any class) and FAILURE_STATUS (4 or 5: bounce_text's reply line).
_ENHANCED_SHAPE = r"(?<![\w.])([{classes}])\.(\d{{1,3}})\.(\d{{1,3}})(?!\.?\d)"
ENHANCED = re.compile(_ENHANCED_SHAPE.format(classes="245"))
FAILURE_STATUS = _ENHANCED_SHAPE.format(classes="45")  # a pattern's text, to compose
# A basic code where replies put it: at a line's start, after "smtp;", "said:", "#", "(" or
# a quote; then anywhere as a word followed by a space or a hyphen.
_BASIC_PLACED = re.compile(
    r"(?:^|[;:#(\[\"'<]|\bsaid|\bsmtp)\s*([245][0-5]\d)(?=[\s-]|$)", re.I | re.M)
_BASIC_ANYWHERE = re.compile(r"(?<![\w.:/-])([45][0-5]\d)(?=[ -][^\d]|$)", re.M)


def enhanced_status(text: str | None) -> str | None:
    """The first enhanced status code of a failure (4.x.x, 5.x.x) in ``text`` ("5.1.1"); a
    success code (2.x.x) only when it is the whole text (a DSN's Status field: in words,
    "Mailman 2.0.12" is a version); else None."""
    text = text or ""
    for match in ENHANCED.finditer(text):
        if match.group(1) in "45":
            return ".".join(match.groups())
    match = ENHANCED.fullmatch(text.strip())
    return ".".join(match.groups()) if match else None


def is_enhanced_status(value: str | None) -> bool:
    return bool(value) and ENHANCED.fullmatch(value.strip()) is not None


def reply_code(text: str | None) -> int | None:
    """The first basic reply code of a failure (4xx/5xx) in ``text``, or None."""
    text = text or ""
    for pattern in (_BASIC_PLACED, _BASIC_ANYWHERE):
        for match in pattern.finditer(text):
            if match.group(1)[0] in "45":
                return int(match.group(1))
    return None


def status_class(status: str | None = None, code: int | None = None) -> str | None:
    """"2", "4" or "5": the class of an enhanced status, else of a reply code."""
    if status:
        return status[0]
    if code:
        return str(code)[0]
    return None
