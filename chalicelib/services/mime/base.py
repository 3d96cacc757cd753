"""What every part of the mime package shares: the two errors, the RFC limits, the text check
for anything that reaches a header, and the lazy email_validator import."""
from __future__ import annotations

import re

class InvalidField(ValueError):
    """A caller-supplied value is invalid. ``field`` names it (``to[2].email``,
    ``headers.X-Foo``, ``attachments[0].data_base64``); ``message`` says what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field} {message}")
        self.field = field
        self.message = message


class MessageBuildError(RuntimeError):
    """The generated message failed the final self-checks. This is a bug (or an unexpected
    standard-library behaviour), never a user error: nothing is sent."""


MAX_DISPLAY_NAME_LENGTH = 256
MAX_HEADER_NAME_LENGTH = 76
MAX_HEADER_VALUE_LENGTH = 16384
MAX_ATTACHMENT_NAME_LENGTH = 255
MAX_CONTENT_TYPE_LENGTH = 255

# RFC 5322 2.1.1: lines MUST NOT exceed 998 octets (excluding CRLF), SHOULD NOT exceed 78.
MAX_LINE = 998
SOFT_LINE = 78

# Anything a parser could treat as a line break or that RFC 5322 forbids in header text:
# all C0 controls except TAB, DEL, and the extra line boundaries of str.splitlines().
_FORBIDDEN_TEXT_CHARS = re.compile("[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
PRINTABLE_ASCII_RE = re.compile(r"[\x20-\x7e\t]*")
LINE_BREAK_RE = re.compile(rb"\r\n|\r|\n")
LINE_BREAK_STR_RE = re.compile(r"\r\n|\r|\n")


def check_text(value: object, field: str, what: str = "") -> str:
    """``value`` must be a str without CR, LF, NUL or any other control/line-break char."""
    if not isinstance(value, str):
        raise InvalidField(field, f"must be a string{what}")
    bad = _FORBIDDEN_TEXT_CHARS.search(value)
    if bad:
        raise InvalidField(
            field,
            f"must not contain CR, LF, NUL or other control characters (found {bad.group()!r})",
        )
    return value


def email_validator_module():
    """email_validator, imported on first use: it compiles many regexes (~20 ms) that a cold
    start serving anything but a send should not pay."""
    import email_validator

    return email_validator
