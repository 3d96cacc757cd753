"""Addresses: the validated Address value and parsing of user input into it (email_validator:
IDN domains become A-labels (punycode) and are lower-cased; a non-ASCII local part (RFC 6531,
internationalized mail) is kept in Unicode NFC, and such an address needs SMTPUTF8)."""
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

# What parse_address produces: a dot-atom local part (RFC 6531: its atoms may hold any
# non-ASCII character; check_text has already refused control characters and line breaks),
# an ASCII (A-label) DNS domain.
_ADDR_SPEC_RE = re.compile(
    rf"[\u0080-\U0010ffff{ATEXT}]+(?:\.[\u0080-\U0010ffff{ATEXT}]+)*"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+"
)
# "Display Name <addr>" / "\"Quoted, Name\" <addr>" / "<addr>"
_NAME_ADDR_RE = re.compile(r'(?:"((?:[^"\\]|\\.)*)"|([^<>"]*?))\s*<([^<>]*)>', re.S)


@dataclass(frozen=True)
class Address:
    """A validated mailbox. ``email``: the local part as given (Unicode NFC when it is not
    ASCII) ``@`` the domain in ASCII (IDN as A-label, lower-cased); ``name`` is the display
    name (any Unicode, no control characters) or None."""

    email: str
    name: str | None = None

    def __post_init__(self) -> None:
        # Cheap invariants so a hand-made Address cannot smuggle anything into a header;
        # full validation is parse_address's job.
        check_text(self.email, "email")
        if not _ADDR_SPEC_RE.fullmatch(self.email):
            raise InvalidField("email", "is not a valid email address")
        if self.name is not None:
            check_text(self.name, "name")

    @property
    def domain(self) -> str:
        """The (ASCII, lower-case) domain part."""
        return self.email.rpartition("@")[2]

    @property
    def smtputf8(self) -> bool:
        """True when the address has a non-ASCII local part: a message to, from or naming
        it in a header needs SMTPUTF8 (RFC 6531, RFC 6532)."""
        return not self.email.isascii()

    def _chunks(self) -> list[str]:
        if not self.name:
            return [self.email]
        return [*phrase_chunks(self.name), f"<{self.email}>"]

    def formatted(self) -> str:
        """The mailbox as it appears in a header: display name quoted or RFC 2047 encoded as
        needed, e.g. ``"Smith, John" <john@example.com>`` or
        ``=?utf-8?q?J=C3=B6rg?= <jorg@xn--bcher-kva.de>``; ASCII unless the local part is
        not (then the address itself is UTF-8, RFC 6532)."""
        return " ".join(self._chunks())

    def header_address(self) -> _HeaderAddress:
        """The same mailbox as an ``email.headerregistry.Address``."""
        return _HeaderAddress(display_name=self.name or "", addr_spec=self.email)


#: RFC 5321 4.5.3.1.1: at most 64 octets before the @-sign (UTF-8 octets, RFC 6531 3.3);
#: email_validator counts the whole address (254 octets) but not this.
MAX_LOCAL_PART_OCTETS = 64


def _validate_email(value: str, field: str):
    ev = email_validator_module()
    try:
        result = ev.validate_email(
            value,
            check_deliverability=False,
            allow_smtputf8=True,
        )
    except ev.EmailNotValidError as exc:
        raise InvalidField(field, f"is not a valid email address: {exc}") from None
    octets = len(result.local_part.encode("utf-8"))
    if octets > MAX_LOCAL_PART_OCTETS:
        raise InvalidField(field, f"is not a valid email address: the part before the @-sign "
                                  f"is {octets} octets long, more than {MAX_LOCAL_PART_OCTETS}")
    return result


def canonical(result) -> str:
    """An email_validator result as the service writes addresses: the local part (NFC) @ the
    ASCII domain (``ascii_email`` when the local part is ASCII too)."""
    return result.ascii_email or f"{result.local_part}@{result.ascii_domain}"


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
        return Address(email=canonical(result), name=_clean_name(name, field))
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
        return Address(email=canonical(result), name=name)
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
