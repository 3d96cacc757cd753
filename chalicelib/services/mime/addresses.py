"""Addresses: the validated Address value and parsing of user input into it (email_validator:
IDN domains become punycode, domains are lower-cased, non-ASCII local parts are refused)."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.headerregistry import Address as _HeaderAddress

from chalicelib.services.mime.base import (
    ATEXT,
    MAX_DISPLAY_NAME_LENGTH,
    InvalidField,
    check_text,
    email_validator_module,
)
from chalicelib.services.mime.headers import phrase_chunks

# What parse_address produces: dot-atom local part, ASCII (punycode) DNS domain.
_ADDR_SPEC_RE = re.compile(
    rf"[{ATEXT}]+(?:\.[{ATEXT}]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+"
)
# "Display Name <addr>" / "\"Quoted, Name\" <addr>" / "<addr>"
_NAME_ADDR_RE = re.compile(r'(?:"((?:[^"\\]|\\.)*)"|([^<>"]*?))\s*<([^<>]*)>', re.S)


@dataclass(frozen=True)
class Address:
    """A validated mailbox. ``email`` is ASCII (IDN domain in punycode, domain lower-cased);
    ``name`` is the display name (any Unicode, no control characters) or None."""

    email: str
    name: str | None = None

    def __post_init__(self) -> None:
        # Cheap invariants so a hand-made Address cannot smuggle anything into a header;
        # full validation is parse_address's job.
        check_text(self.email, "email")
        if not _ADDR_SPEC_RE.fullmatch(self.email):
            raise InvalidField("email", "is not a valid ASCII email address")
        if self.name is not None:
            check_text(self.name, "name")

    @property
    def domain(self) -> str:
        """The (ASCII, lower-case) domain part."""
        return self.email.rpartition("@")[2]

    def _chunks(self) -> list[str]:
        if not self.name:
            return [self.email]
        return [*phrase_chunks(self.name), f"<{self.email}>"]

    def formatted(self) -> str:
        """The mailbox as it appears in a header: ASCII only, display name quoted or RFC 2047
        encoded as needed, e.g. ``"Smith, John" <john@example.com>`` or
        ``=?utf-8?q?J=C3=B6rg?= <jorg@xn--bcher-kva.de>``."""
        return " ".join(self._chunks())

    def header_address(self) -> _HeaderAddress:
        """The same mailbox as an ``email.headerregistry.Address``."""
        return _HeaderAddress(display_name=self.name or "", addr_spec=self.email)


def _validate_email(value: str, field: str):
    if not value.rpartition("@")[0].isascii():
        raise InvalidField(
            field,
            "is not a valid email address: internationalized (non-ASCII) characters before "
            "the @-sign are not supported",
        )
    ev = email_validator_module()
    try:
        return ev.validate_email(
            value,
            check_deliverability=False,
            allow_smtputf8=False,
        )
    except ev.EmailNotValidError as exc:
        raise InvalidField(field, f"is not a valid email address: {exc}") from None


def _clean_name(name: object, field: str) -> str | None:
    if name is None:
        return None
    check_text(name, field, " or null")
    name = name.replace("\t", " ").strip()
    if not name:
        return None
    if len(name) > MAX_DISPLAY_NAME_LENGTH:
        raise InvalidField(field, f"must be at most {MAX_DISPLAY_NAME_LENGTH} characters")
    return name


# Successful parses of address strings, remembered: validation (email_validator, IDNA) costs
# ~0.1 ms and a gateway sees the same senders and recipients again and again. The result
# depends on the string alone; errors are never remembered (they name the caller's field).
_PARSED: dict[str, Address] = {}
_PARSED_MAX = 4096


def parse_address(value: object, field: str) -> Address:
    """Parse ``"a@b.com"``, ``"Name <a@b.com>"``, ``{"email": ..., "name": ...}`` (or an
    :class:`Address`) into a validated :class:`Address`. Errors name ``field`` for strings and
    ``field.email`` / ``field.name`` for mappings."""
    if isinstance(value, str):
        known = _PARSED.get(value)
        if known is not None:
            return known
        address = _parse_address(value, field)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[value] = address
        return address
    return _parse_address(value, field)


def _parse_address(value: object, field: str) -> Address:
    if isinstance(value, Address):
        value = {"email": value.email, "name": value.name}
    if isinstance(value, str):
        check_text(value, field)
        if not value.strip():
            raise InvalidField(field, "is required")
        value = value.strip()
        name: str | None = None
        if "<" in value or ">" in value:
            match = _NAME_ADDR_RE.fullmatch(value)
            if not match:
                raise InvalidField(
                    field,
                    'is not a valid email address: use "email@example.com" or '
                    '"Display Name <email@example.com>" (quote names containing < > or ")',
                )
            quoted, plain, value = match.groups()
            name = re.sub(r"\\(.)", r"\1", quoted, flags=re.S) if quoted is not None else plain
            value = value.strip()
        result = _validate_email(value, field)
        return Address(email=result.ascii_email, name=_clean_name(name, field))
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in ("email", "name"))
        if unknown:
            raise InvalidField(field, f"has unexpected key(s): {', '.join(unknown)}")
        email_field = f"{field}.email"
        email = value.get("email")
        if email is None or (isinstance(email, str) and not email.strip()):
            raise InvalidField(email_field, "is required")
        check_text(email, email_field)
        result = _validate_email(email.strip(), email_field)
        name = _clean_name(value.get("name"), f"{field}.name")
        return Address(email=result.ascii_email, name=name)
    raise InvalidField(field, 'must be an email address string or an object {"email", "name"}')


def parse_address_list(values: object, field: str) -> list[Address]:
    """Parse a list of addresses (``None`` gives ``[]``; a single string or mapping is taken as
    a one-element list). Errors name ``field[i]`` (``to[2].email``)."""
    if values is None:
        return []
    if isinstance(values, (str, Mapping, Address)):
        return [parse_address(values, field)]
    if not isinstance(values, (list, tuple)):
        raise InvalidField(field, "must be a list of email addresses")
    return [parse_address(value, f"{field}[{index}]") for index, value in enumerate(values)]
