"""Checks on raw messages: line endings and the wire format, the self-check build_message runs
on its own output, and reading the originator out of a submitted message (SMTP gateway)."""
from __future__ import annotations

import re
from email import policy as email_policy
from email.errors import NonASCIILocalPartDefect
from email.headerregistry import HeaderRegistry

from chalicelib.services.mime.addresses import Address, parse_address
from chalicelib.services.mime.headers import message_id as read_message_id
from chalicelib.services.mime.base import (
    ATEXT,
    LINE_BREAK_RE,
    LINE_BREAK_STR_RE,
    MAX_LINE,
    InvalidField,
    MessageBuildError,
    email_validator_module,
)


class _HeaderClasses(HeaderRegistry):
    """The standard header registry, but each header name's class is made once: the stock
    ``HeaderRegistry.__getitem__`` builds a new class with ``type()`` for every header it
    parses, the largest single cost of reading a submission's headers in the SMTP gateway
    (bench_smtp profile). The classes are the same; at most ``LIMIT`` names are kept (a
    message may carry any number of X- headers)."""

    LIMIT = 512

    def __init__(self):
        super().__init__()
        self._made: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        key = name.lower()
        made = self._made.get(key)
        if made is None:
            made = super().__getitem__(name)
            if len(self._made) < self.LIMIT:
                self._made[key] = made
        return made

    def map_to_type(self, name: str, cls) -> None:
        self._made.pop(name.lower(), None)
        super().map_to_type(name, cls)


#: ``email.policy.default`` for reading headers, with :class:`_HeaderClasses`.
PARSE_POLICY = email_policy.default.clone(header_factory=_HeaderClasses())


class HeaderBlock:
    """A message's headers as ``BytesParser(policy=PARSE_POLICY)`` reads them (``get``,
    ``get_all``, ``raw_items``), each header object made when asked for. The email package
    splits the lines (compat32 stores each value exactly as policy.default does); parsed
    with policy.default, the parser's close() would also build the Content-Type header
    object to check for a multipart, which readers of a few headers never need (half the
    cost of reading a submission's originator, bench_smtp profile)."""

    def __init__(self, raw: bytes):
        from email.parser import BytesParser, Parser  # not loaded at cold start

        if not raw.isascii():
            try:  # RFC 6532: UTF-8 header fields, read as text (the bytes parser would
                # turn every non-ASCII byte into a surrogate escape)
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                pass  # not UTF-8: read as bytes (inbound mail is kept whatever it holds)
            else:
                self._items = list(Parser(policy=email_policy.compat32).parsestr(
                    text, headersonly=True).raw_items())
                return
        self._items = list(BytesParser(policy=email_policy.compat32).parsebytes(
            raw, headersonly=True).raw_items())

    def raw_items(self):
        return iter(self._items)

    def get_all(self, name: str, failobj=None):
        name = name.lower()
        values = [PARSE_POLICY.header_fetch_parse(k, v) for k, v in self._items
                  if k.lower() == name]
        return values or failobj

    def get(self, name: str, failobj=None):
        """The first ``name`` header (``message[name]``), or ``failobj``."""
        name = name.lower()
        for key, value in self._items:
            if key.lower() == name:
                return PARSE_POLICY.header_fetch_parse(key, value)
        return failobj


def normalize_line_endings(data: bytes) -> bytes:
    """Turn every CRLF, bare CR and bare LF into CRLF (also accepts ``str``). After this, the
    only way to write SMTP's end-of-data marker is a line holding a single dot, which an SMTP
    client dot-stuffs; the ``\\n.\\n`` / ``\\r.\\r`` / ``\\n.\\r\\n`` smuggling variants
    cannot exist."""
    if isinstance(data, str):
        return LINE_BREAK_STR_RE.sub("\r\n", data)
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise TypeError("normalize_line_endings() needs bytes")
    # Already clean when every CR and every LF belongs to a CRLF (CRLFs cannot overlap): three
    # C-speed counts instead of a regex pass over a body that is almost always clean.
    crlf = data.count(b"\r\n")
    if data.count(b"\r") == crlf and data.count(b"\n") == crlf:
        return data
    return LINE_BREAK_RE.sub(b"\r\n", data)


def needs_smtputf8(raw: bytes, *addresses: str) -> bool:
    """Whether a message needs the SMTPUTF8 extension (RFC 6531) to be sent: an envelope
    address (the recipient, the sender) or its header block holds a non-ASCII character
    (RFC 6532 UTF-8 headers). Non-ASCII in the body (inside MIME parts) needs 8BITMIME, not
    this. The gateway accepts such mail only when the client declared SMTPUTF8, and the
    HTTP API writes UTF-8 only into the address fields of a mailbox that has a non-ASCII
    local part, so this rule, read from the stored bytes and addresses, is the message's."""
    return not all(a.isascii() for a in addresses if a) or \
        not raw[:header_block_end(raw)].isascii()


#: A Bcc or Resent-Bcc field (RFC 5322 3.6.3, 3.6.6), any case, with its folded lines; also
#: the obsolete form with white space before the colon (RFC 5322 4.5.3), which some parsers
#: still read as the field. Applied to a header block with CRLF line endings only.
_BCC_FIELD = re.compile(rb"(?im)^(?:resent-)?bcc[ \t]*:[^\r\n]*(?:\r\n[ \t][^\r\n]*)*\r\n")


def header_block_end(raw: bytes) -> int:
    """Where the header block of ``raw`` (CRLF line endings) ends: the offset just after the
    last header line's CRLF (0 when the message starts with the empty line, the whole
    length when there is no body)."""
    if raw.startswith(b"\r\n"):
        return 0
    end = raw.find(b"\r\n\r\n")
    return len(raw) if end < 0 else end + 2


def strip_bcc(raw: bytes) -> bytes:
    """``raw`` without its Bcc and Resent-Bcc fields, however written (case, folding, one or
    several fields, any number of addresses). RFC 5322 3.6.3: the blind recipients are the
    envelope's; a copy carrying the field would show them to every recipient."""
    end = header_block_end(raw)
    head = raw[:end]
    if _BCC_FIELD.search(head) is None:
        return raw
    return _BCC_FIELD.sub(b"", head) + raw[end:]


def check_wire_format(raw: bytes, *, utf8_headers: bool = False) -> None:
    """Raise :class:`MessageBuildError` unless ``raw`` is 7-bit ASCII without NUL (with
    ``utf8_headers``, its header block may be UTF-8: RFC 6532), uses only CRLF line endings
    (and ends with one), has no line over 998 octets and contains no line consisting of a
    single dot."""
    if not raw.endswith(b"\r\n"):
        raise MessageBuildError("message does not end with CRLF")
    end = header_block_end(raw) if utf8_headers else 0
    if not raw[end:].isascii() or b"\x00" in raw:
        raise MessageBuildError("message contains non-ASCII or NUL bytes")
    if end:
        try:
            raw[:end].decode("utf-8")
        except UnicodeDecodeError:
            raise MessageBuildError("the header block is not UTF-8") from None
    if normalize_line_endings(raw) != raw:
        raise MessageBuildError("message contains a bare CR or LF")
    lines = raw.split(b"\r\n")
    if max(len(line) for line in lines) > MAX_LINE:
        raise MessageBuildError("message contains a line longer than 998 octets")
    if b"." in lines:
        raise MessageBuildError("message contains a line holding a single dot")


def message_size(raw: bytes) -> int:
    """Size on the wire in octets."""
    return len(raw)


_HEADER_LINE_RE = re.compile(rb"([\x21-\x39\x3b-\x7e]+):(.*)", re.S)
_ATOM_RE = re.compile(rf"[{ATEXT}]+")


def verify_built_cheap(raw: bytes, *, from_, to, cc, reply_to, subject, header_names,
                  message_id) -> bool:
    """The checks of verify_built with bytes operations, for output whose address headers are
    unambiguous by construction (display names of atoms or encoded-words only, which are
    atoms too). Returns False when the full parse-back is needed; raises
    MessageBuildError when a check fails. Runs after check_wire_format (CRLF only, ASCII)."""
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        return False
    fields: dict[bytes, list[bytes]] = {}
    current: list[bytes] | None = None
    for line in raw[:end].split(b"\r\n"):
        if line[:1] in (b" ", b"\t") and current is not None:
            current.append(line)  # a continuation: unfolding removes the CRLF only
            continue
        match = _HEADER_LINE_RE.fullmatch(line)
        if match is None:
            return False  # something a parser might read differently: parse it for real
        current = [match.group(2)]
        fields.setdefault(match.group(1).lower(), []).append(current)  # type: ignore[arg-type]
    expected = ["date", "from", "message-id", "mime-version", "content-type"]
    expected += [n.lower() for n in header_names]
    expected += ["reply-to"] * bool(reply_to) + ["to"] * bool(to) + ["cc"] * bool(cc)
    expected += ["subject"] * (subject is not None)
    actual = [name.decode("ascii") for name, values in fields.items() for _ in values
              if name != b"content-transfer-encoding"]
    if sorted(actual) != sorted(expected):
        raise MessageBuildError(f"unexpected header set {sorted(actual)}")

    def value(name: bytes) -> str:
        return b"".join(fields[name][0]).decode("utf-8").strip()

    for name, intended in (("From", [from_]), ("Reply-To", reply_to), ("To", to), ("Cc", cc)):
        if not intended:
            continue
        chunks = [a._chunks() for a in intended]
        if not all(_ATOM_RE.fullmatch(c) for mailbox in chunks for c in mailbox[:-1]):
            return False  # a quoted display name: let the real parser confirm the addresses
        if value(name.lower().encode()) != ", ".join(" ".join(m) for m in chunks):
            raise MessageBuildError(f"{name} header does not parse back to the intended addresses")
    if value(b"message-id") != f"<{message_id}>":
        raise MessageBuildError("Message-ID does not parse back")
    return True


def verify_built(raw: bytes, *, from_, to, cc, reply_to, subject, header_names, message_id) -> None:
    """Parse the output back and check nothing was added, lost or split."""
    from email.parser import Parser  # the parser is not loaded at cold start

    # As text: the header block may be UTF-8 (RFC 6532), the rest is ASCII.
    parsed = Parser(policy=email_policy.default).parsestr(raw.decode("utf-8"), headersonly=True)
    expected = ["date", "from", "message-id", "mime-version", "content-type"]
    expected += [n.lower() for n in header_names]
    expected += ["reply-to"] * bool(reply_to) + ["to"] * bool(to) + ["cc"] * bool(cc)
    expected += ["subject"] * (subject is not None)
    actual = [key.lower() for key in parsed.keys() if key.lower() != "content-transfer-encoding"]
    if sorted(actual) != sorted(expected):
        raise MessageBuildError(f"unexpected header set {sorted(actual)}")
    for name, intended in (("From", [from_]), ("Reply-To", reply_to), ("To", to), ("Cc", cc)):
        if not intended:
            continue
        got = [a.addr_spec for a in parsed[name].addresses]
        if got != [a.email for a in intended]:
            raise MessageBuildError(f"{name} header does not parse back to the intended addresses")
    if parsed["Message-ID"].strip() != f"<{message_id}>":
        raise MessageBuildError("Message-ID does not parse back")


# The originator checks below, remembered per raw header value: a gateway sees the same From
# line on every message of a sender, and checking it costs ~0.2 ms (the header registry plus
# two address validators). Only successes are kept; the key is the exact raw text.
_MAILBOXES: dict[tuple[str, tuple[str, ...]], Address] = {}
_MAILBOXES_MAX = 4096


def _single_mailbox(msg, header: str, field: str) -> Address | None:
    raw_values = tuple(str(v) for k, v in msg.raw_items() if k.lower() == header.lower())
    if not raw_values:
        return None
    key = (header.lower(), raw_values)
    known = _MAILBOXES.get(key)
    if known is not None:
        return known
    address = _check_single_mailbox(msg, header, field)
    if address is not None:
        if len(_MAILBOXES) >= _MAILBOXES_MAX:
            _MAILBOXES.clear()
        _MAILBOXES[key] = address
    return address


def _check_single_mailbox(msg, header: str, field: str) -> Address | None:
    values = msg.get_all(header) or []
    if not values:
        return None
    if len(values) > 1:
        raise InvalidField(field, f"the message has more than one {header} header")
    raw_value = next(v for k, v in msg.raw_items() if k.lower() == header.lower())
    return _check_mailbox(values[0], raw_value, header, field)


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _structure(text: str) -> str:
    """``text`` with every non-ASCII character replaced by an ASCII letter: what the second
    parser reads of an RFC 6532 header. Non-ASCII characters are never specials or
    white space to either parser, so the structure (which part is the address) is kept."""
    return _NON_ASCII.sub("a", text)


def _check_mailbox(parsed, raw_value, header: str, field: str) -> Address:
    """One header value that must hold exactly one unambiguous mailbox."""
    # A non-ASCII local part is what RFC 6531/6532 allow; the email package notes it.
    if [d for d in parsed.defects if not isinstance(d, NonASCIILocalPartDefect)]:
        raise InvalidField(field, f"the {header} header is malformed")
    addresses = parsed.addresses
    if len(addresses) != 1 or parsed.groups[0].display_name is not None:
        raise InvalidField(field, f"the {header} header must contain exactly one mailbox")
    mailbox = addresses[0]
    try:
        address = parse_address(
            {"email": mailbox.addr_spec, "name": mailbox.display_name or None}, field
        )
    except InvalidField as exc:
        raise InvalidField(field, f"the {header} header {exc.message}") from None
    # Cross-check with a second, independent parser of the raw header text: if email_validator
    # reads a different address out of it, the header is ambiguous and must not be trusted.
    # email_validator refuses a non-ASCII display name that is not quoted, which RFC 6532
    # allows: it reads the header's structure instead, compared with the first parser's
    # address read the same way.
    unfolded = LINE_BREAK_STR_RE.sub("", str(raw_value)).strip()
    ev = email_validator_module()
    expected = address.email
    if not unfolded.isascii():
        unfolded = _structure(unfolded)
        expected = ev.validate_email(_structure(mailbox.addr_spec), check_deliverability=False,
                                     allow_smtputf8=False).ascii_email
    try:
        second = ev.validate_email(
            unfolded, check_deliverability=False, allow_smtputf8=False, allow_display_name=True
        ).ascii_email
    except ev.EmailNotValidError as exc:
        raise InvalidField(field, f"the {header} header is not a valid mailbox: {exc}") from None
    if second != expected:
        raise InvalidField(field, f"the {header} header is ambiguous")
    return address


#: Headers naming who sent a message besides From (RFC 5322 3.6.2, 3.6.6). Receivers show
#: them ("on behalf of"), so they are authorized like From. Resent blocks may repeat.
RESENT_ORIGINATORS = (("Resent-From", "resent-from"), ("Resent-Sender", "resent-sender"))


def _resent_originators(msg) -> list[tuple[str, Address]]:
    found = []
    for header, field in RESENT_ORIGINATORS:
        values = msg.get_all(header) or []
        raw_values = [v for k, v in msg.raw_items() if k.lower() == header.lower()]
        for parsed, raw_value in zip(values, raw_values):
            found.append((field, _check_mailbox(parsed, raw_value, header, field)))
    return found


def header_addresses(raw: bytes) -> dict:
    """Read the originator of a raw message (for the SMTP gateway's From-domain check).

    Returns ``{"from": Address, "sender": Address | None, "resent": [(field, Address)],
    "subject": str | None, "message_id": str | None}`` (``resent``: each Resent-From and
    Resent-Sender mailbox; ``message_id`` as ``headers.message_id`` reads it). Raises
    :class:`InvalidField` (field ``from``, ``sender``, ``resent-from``, ``resent-sender`` or
    ``subject``) when From is missing, is
    repeated, holds more than one mailbox or a group, is malformed, or when two independent
    parsers disagree about the address in it."""
    if isinstance(raw, (bytearray, memoryview)):
        raw = bytes(raw)
    if not isinstance(raw, bytes):
        raise TypeError("header_addresses() needs bytes")
    msg = HeaderBlock(raw)
    from_ = _single_mailbox(msg, "From", "from")
    if from_ is None:
        raise InvalidField("from", "the message has no From header")
    sender = _single_mailbox(msg, "Sender", "sender")
    subjects = msg.get_all("Subject") or []
    if len(subjects) > 1:
        raise InvalidField("subject", "the message has more than one Subject header")
    subject = str(subjects[0]) if subjects else None
    # The raw value (folding and all): the parsed MessageIDHeader is not needed to read it.
    ids = [v for k, v in msg.raw_items() if k.lower() == "message-id"]
    return {"from": from_, "sender": sender, "resent": _resent_originators(msg),
            "subject": subject, "message_id": read_message_id(ids[0]) if ids else None}
