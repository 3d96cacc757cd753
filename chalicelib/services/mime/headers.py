"""Header text: the headers the service owns, custom header validation, the RFC 2047
encoding and folding of header values that carry user text (why we fold ourselves rather than
through email.headerregistry: see the package docstring), and reading a Message-ID."""
from __future__ import annotations

import re
from collections.abc import Mapping
from email import base64mime, quoprimime
from email.utils import quote

from chalicelib.services.mime.base import (
    ATEXT,
    MAX_LINE,
    PRINTABLE_ASCII_RE,
    SOFT_LINE,
    MAX_HEADER_NAME_LENGTH,
    MAX_HEADER_VALUE_LENGTH,
    InvalidField,
    check_text,
)

#: Headers the service writes itself (lower-case). Refused in ``headers`` whatever their case.
OWNED_HEADERS: frozenset[str] = frozenset(
    {
        # originator / destination / identification (RFC 5322 3.6)
        "from",
        "sender",
        "reply-to",
        "to",
        "cc",
        "bcc",
        "subject",
        "date",
        "orig-date",
        "message-id",
        # MIME structure (RFC 2045): owned by the MIME tree we build
        "mime-version",
        "content-type",
        "content-transfer-encoding",
        "content-disposition",
        "content-id",
        "content-description",
        # trace and authentication: added by MTAs or by our signer, never by the sender
        "return-path",
        "received",
        "received-spf",
        "authentication-results",
        "dkim-signature",
        "domainkey-signature",
        "delivered-to",
        "envelope-to",
    }
)

#: Header-name prefixes the service owns (lower-case): every ``Content-*`` MIME header,
#: the ``Resent-*`` block, ARC sealing, our own ``X-Service-*`` headers and the Amazon SES
#: control headers (``X-SES-CONFIGURATION-SET`` etc. would let a sender pick another
#: configuration set).
OWNED_HEADER_PREFIXES: tuple[str, ...] = ("content-", "resent-", "arc-", "x-service-", "x-ses-")

# RFC 2047 2: an encoded-word is at most 75 characters.
_MAX_ENCODED_WORD = 75
_EW_OVERHEAD = len("=?utf-8?b??=")
_FIELD_NAME_RE = re.compile(r"[\x21-\x39\x3b-\x7e]+")  # RFC 5322 ftext: 33..126 except ':'
_ATOM_PHRASE_RE = re.compile(rf"[{ATEXT}]+(?: [{ATEXT}]+)*")
# Q-encoding characters that are safe even inside a phrase (RFC 2047 5(3)) -- the set that
# email.quoprimime.header_encode leaves alone; everything else costs 3 characters (=XX).
_Q_SAFE_BYTES = frozenset(b"-!*+/ abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _encoded_words(text: str) -> list[str]:
    """Split ``text`` into RFC 2047 encoded-words of at most 75 characters each, never
    splitting a character, choosing per word the shorter of Q and B encoding (Q only with
    phrase-safe characters, so the words are valid in display names too). Adjacent
    encoded-words separated by whitespace decode to the concatenation of their texts."""
    words: list[str] = []
    budget = _MAX_ENCODED_WORD - _EW_OVERHEAD
    chunk: list[str] = []
    nbytes = q_len = 0

    def flush() -> None:
        if not chunk:
            return
        raw = "".join(chunk).encode("utf-8")
        if q_len <= _b_len(len(raw)):
            words.append(quoprimime.header_encode(raw, "utf-8"))
        else:
            words.append(base64mime.header_encode(raw, "utf-8"))

    for char in text:
        encoded = char.encode("utf-8")
        char_q = sum(1 if b in _Q_SAFE_BYTES else 3 for b in encoded)
        if chunk and min(q_len + char_q, _b_len(nbytes + len(encoded))) > budget:
            flush()
            chunk, nbytes, q_len = [], 0, 0
        chunk.append(char)
        nbytes += len(encoded)
        q_len += char_q
    flush()
    return words


def _b_len(nbytes: int) -> int:
    return 4 * ((nbytes + 2) // 3)


def fold(name: str, chunks: list[str]) -> str:
    """Join ``chunks`` with single spaces, replacing a space with CRLF + space wherever the line
    would otherwise exceed 78 characters. Returns the value for ``Message.set_raw`` (without
    ``"Name: "``). Unfolding (deleting each CRLF) gives back ``" ".join(chunks)``. Empty chunks
    (runs of spaces) are never used as fold points so no line is whitespace only."""
    lines: list[str] = []
    current = ""
    used = len(name) + 2  # "Name: "
    for index, chunk in enumerate(chunks):
        if index == 0:
            current = chunk
            continue
        if chunk and used + len(current) + 1 + len(chunk) > SOFT_LINE and current.strip():
            lines.append(current)
            current = " " + chunk
            used = 0
        else:
            current += " " + chunk
    lines.append(current)
    return "\r\n".join(lines)


def phrase_chunks(name: str) -> list[str]:
    """A display name as foldable header chunks: plain atoms, a quoted-string, or (non-ASCII,
    long, or anything that looks like an encoded-word) RFC 2047 encoded-words."""
    if name.isascii() and "=?" not in name:
        if _ATOM_PHRASE_RE.fullmatch(name):
            return name.split(" ")
        quoted = '"' + quote(name) + '"'
        if len(quoted) <= SOFT_LINE - 2:
            return [quoted]
    return _encoded_words(name)


def unstructured_chunks(name: str, value: str, *, raw_ascii: bool) -> list[str]:
    """An unstructured header value (Subject, custom header) as foldable chunks. Printable
    ASCII is written as is and folded at spaces; anything else (or a word too long for a
    998-octet line) becomes encoded-words. With ``raw_ascii`` (custom headers, whose words
    were length-checked by check_header) ASCII that looks like an encoded-word is kept
    verbatim."""
    if value.isascii() and PRINTABLE_ASCII_RE.fullmatch(value) and value == value.strip():
        words = value.split(" ")
        fits = max(len(word) for word in words) <= MAX_LINE - len(name) - 2
        if raw_ascii or ("=?" not in value and fits):
            return words
    return _encoded_words(value)


_MSG_ID_RE = re.compile(r"<([^<>]+)>")


def message_id(value: object) -> str | None:
    """The msg-id of a Message-ID header value as the service stores it: without the angle
    brackets, the folding whitespace (a msg-id holds none, RFC 5322 3.6.4) or a comment after
    it (``<a@b> (added by x)``). None when nothing is left. Matching a feedback report's copy of
    a header to the message we sent depends on both sides reading it this one way."""
    if value is None:
        return None
    text = "".join(str(value).split())
    found = _MSG_ID_RE.search(text)
    return (found.group(1) if found else text.strip("<>"))[:255] or None


def is_owned_header(name: str) -> bool:
    """True if ``name`` (any case) is a header the service writes itself."""
    lowered = name.lower()
    return lowered in OWNED_HEADERS or lowered.startswith(OWNED_HEADER_PREFIXES)


def check_header(name: object, value: object, field: str) -> tuple[str, str]:
    if not isinstance(name, str) or not name:
        raise InvalidField(field, "header names must be non-empty strings")
    item = f"{field}.{name}"
    if not _FIELD_NAME_RE.fullmatch(name):
        raise InvalidField(
            f"{field}.{name!r}" if not name.isprintable() else item,
            "is not a valid header name: only printable ASCII characters except ':' and "
            "space are allowed",
        )
    if len(name) > MAX_HEADER_NAME_LENGTH:
        raise InvalidField(
            item, f"header names must be at most {MAX_HEADER_NAME_LENGTH} characters"
        )
    if is_owned_header(name):
        raise InvalidField(item, "is set by the service and cannot be given as a custom header")
    check_text(value, item)
    value = value.strip()
    if len(value) > MAX_HEADER_VALUE_LENGTH:
        raise InvalidField(
            item, f"header values must be at most {MAX_HEADER_VALUE_LENGTH} characters"
        )
    longest = max((len(word) for word in value.split(" ")), default=0)
    if value.isascii() and len(name) + 2 + longest > MAX_LINE:
        raise InvalidField(item, "contains a word too long to fold into a 998-character line")
    return name, value


def validate_custom_headers(headers: object, field: str = "headers") -> list[tuple[str, str]]:
    """Validate user headers: RFC 5322 field names (printable ASCII 33..126 except ':'),
    values without CR/LF/NUL/control characters, no header the service owns (case-insensitive,
    see :data:`OWNED_HEADERS` and :data:`OWNED_HEADER_PREFIXES`), no name given twice in
    different cases. Values are stripped. Errors name ``headers.<Name>``."""
    if headers is None:
        return []
    if not isinstance(headers, Mapping):
        raise InvalidField(field, "must be an object mapping header names to values")
    result: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, value in headers.items():
        name, value = check_header(name, value, field)
        if name.lower() in seen:
            raise InvalidField(
                f"{field}.{name}", "is given more than once (header names are case-insensitive)"
            )
        seen.add(name.lower())
        result.append((name, value))
    return result
