"""Building: attachments (strict Base64), the MIME tree with the standard library's email package,
the direct writer for single-part messages, and build_message, which ties them together."""
from __future__ import annotations

import base64
import binascii
import functools
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timezone
from email import policy as email_policy
from email.contentmanager import _encode_text
from email.message import EmailMessage, MIMEPart
from email.utils import format_datetime

from chalicelib.services.mime.addresses import Address
from chalicelib.services.mime.base import (
    ATEXT,
    LINE_BREAK_STR_RE,
    PRINTABLE_ASCII_RE,
    SOFT_LINE,
    MAX_ATTACHMENT_NAME_LENGTH,
    InvalidField,
    check_text,
    email_validator_module,
)
from chalicelib.services.mime.checks import (
    verify_built,
    verify_built_cheap,
    check_wire_format,
    normalize_line_endings,
)
from chalicelib.services.mime.headers import check_header, fold, unstructured_chunks

_DOT_ATOM_RE = re.compile(rf"[{ATEXT}]+(?:\.[{ATEXT}]+)*")
# Body bytes quoted-printable leaves alone (printable ASCII, TAB, line breaks).
_QP_SAFE_BYTES = bytes(range(32, 127)) + b"\t\n"
_BASE64_RE = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
# RFC 6838 4.2 restricted-name
_MEDIA_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_CONTENT_TYPE_RE = re.compile(rf"({_MEDIA_NAME})/({_MEDIA_NAME})")

# Generation policy: CRLF, 78-column folding for the headers the email package writes
# (Content-Type, Content-Disposition, Date, Message-ID), 7bit so every non-ASCII byte is
# transfer-encoded, and refold_source="none" so the header values we pre-fold are written
# exactly as given.
_POLICY = email_policy.SMTP.clone(cte_type="7bit", refold_source="none")


def _check_attachment_name(name: object, field: str) -> str:
    if name is None or (isinstance(name, str) and not name.strip()):
        raise InvalidField(field, "is required")
    check_text(name, field)
    name = name.strip()
    if len(name) > MAX_ATTACHMENT_NAME_LENGTH:
        raise InvalidField(field, f"must be at most {MAX_ATTACHMENT_NAME_LENGTH} characters")
    return name


def _check_content_type(content_type: object, field: str) -> tuple[str, str]:
    if content_type is None or content_type == "":
        raise InvalidField(field, "is required")
    if not isinstance(content_type, str):
        raise InvalidField(field, "must be a string")
    match = _CONTENT_TYPE_RE.fullmatch(content_type.strip())
    if not match:
        raise InvalidField(
            field, "must be a media type of the form type/subtype (e.g. application/pdf)"
        )
    maintype, subtype = match.group(1).lower(), match.group(2).lower()
    if maintype in ("multipart", "message"):
        raise InvalidField(
            field,
            f"{maintype}/* attachments are not supported; send the file as "
            "application/octet-stream",
        )
    return maintype, subtype


def decode_attachment(att: object, index: int) -> tuple[str, str, bytes]:
    """Validate and decode ``{"name", "content_type", "data_base64"}`` into
    ``(name, "type/subtype", data)``. Base64 is strict (standard alphabet, correct padding);
    whitespace and line breaks in it are ignored. Errors name ``attachments[i].<key>``."""
    field = f"attachments[{index}]"
    if not isinstance(att, Mapping):
        raise InvalidField(field, 'must be an object {"name", "content_type", "data_base64"}')
    unknown = sorted(str(k) for k in att if k not in ("name", "content_type", "data_base64"))
    if unknown:
        raise InvalidField(field, f"has unexpected key(s): {', '.join(unknown)}")
    name = _check_attachment_name(att.get("name"), f"{field}.name")
    maintype, subtype = _check_content_type(att.get("content_type"), f"{field}.content_type")
    data_field = f"{field}.data_base64"
    encoded = att.get("data_base64")
    if encoded is None:
        raise InvalidField(data_field, "is required")
    if not isinstance(encoded, str):
        raise InvalidField(data_field, "must be a Base64 string")
    compact = re.sub(r"[ \t\r\n\f\v]+", "", encoded)
    if not compact.isascii():
        raise InvalidField(data_field, "is not valid Base64: non-ASCII characters")
    if not _BASE64_RE.fullmatch(compact):
        # b64decode(validate=True) checks the alphabet but (before Python 3.13's strict_mode)
        # still accepts a wrong length or excess/misplaced padding.
        raise InvalidField(
            data_field,
            "is not valid Base64: use the standard alphabet (A-Z a-z 0-9 + /) with '=' padding "
            "to a multiple of 4 characters",
        )
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidField(data_field, f"is not valid Base64: {exc}") from None
    return name, f"{maintype}/{subtype}", data


def _body_text(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidField(field, "must be a string")
    # CRLF, bare CR and bare LF all become one line break; the email package writes CRLF.
    return LINE_BREAK_STR_RE.sub("\n", value)


def _choose_cte(text: str, force_base64: bool) -> str:
    if force_base64:
        return "base64"
    data = text.encode("utf-8")
    lines = data.split(b"\n")
    if (
        data.isascii()
        and all(len(line) <= SOFT_LINE for line in lines)
        and PRINTABLE_ASCII_RE.fullmatch(text.replace("\n", ""))
        and b"." not in lines
    ):
        return "7bit"
    unsafe = len(data.translate(None, _QP_SAFE_BYTES))
    # quoted-printable costs ~3 octets per unsafe byte, base64 4/3 per byte
    return "quoted-printable" if unsafe * 6 < len(data) else "base64"


def _text_part(text: str, subtype: str, force_base64: bool) -> MIMEPart:
    part = MIMEPart(policy=_POLICY)
    part.set_content(text, subtype=subtype, charset="utf-8", cte=_choose_cte(text, force_base64))
    return part


def _attachment_part(name: str, content_type: str, data: bytes) -> MIMEPart:
    maintype, subtype = content_type.split("/", 1)
    part = MIMEPart(policy=_POLICY)
    part.set_content(data, maintype, subtype, disposition="attachment", filename=name)
    return part


def _check_address_list(values: object, field: str) -> list[Address]:
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, Address) for v in values):
        raise InvalidField(field, "must be a list of Address (use parse_address_list)")
    return list(values)


def _address_header(name: str, addresses: list[Address]) -> str:
    chunks: list[str] = []
    for index, address in enumerate(addresses):
        mailbox = address._chunks()
        if index < len(addresses) - 1:
            mailbox[-1] += ","
        chunks.extend(mailbox)
    return fold(name, chunks)


def _message_id_domain(domain: object) -> str:
    if isinstance(domain, str) and domain in _ID_DOMAINS:
        return _ID_DOMAINS[domain]
    if not isinstance(domain, str) or not domain:
        raise InvalidField("message_id_domain", "is required")
    check_text(domain, "message_id_domain")
    ev = email_validator_module()
    try:
        ascii_domain = ev.validate_email(f"postmaster@{domain}",
                                         check_deliverability=False).ascii_domain
    except ev.EmailNotValidError as exc:
        raise InvalidField("message_id_domain", f"is not a valid domain: {exc}") from None
    if len(_ID_DOMAINS) < 1024:  # a server's few sending domains, validated once
        _ID_DOMAINS[domain] = ascii_domain
    return ascii_domain


_ID_DOMAINS: dict[str, str] = {}


def _clean_message_id(message_id: object) -> str:
    if not isinstance(message_id, str):
        raise InvalidField("message_id", "must be a string")
    value = message_id.strip()
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1]
    left, at, right = value.partition("@")
    valid = at and _DOT_ATOM_RE.fullmatch(left) and _DOT_ATOM_RE.fullmatch(right)
    if not valid or len(value) > 250:
        raise InvalidField("message_id", "must look like local-part@domain (RFC 5322 msg-id)")
    return value


def build_message(
    *,
    from_: Address,
    to: list[Address],
    cc: list[Address],
    reply_to: list[Address],
    subject: str | None,
    text_body: str | None,
    html_body: str | None,
    headers: list[tuple[str, str]],
    attachments: list[tuple[str, str, bytes]],
    message_id_domain: str,
    date: datetime | None = None,
    message_id: str | None = None,
) -> tuple[bytes, str]:
    """Build the message. Returns ``(raw, message_id)``: the RFC 5322 bytes (7-bit, CRLF line
    endings, no line over 998 octets; the address fields in UTF-8 when a mailbox has a
    non-ASCII local part, RFC 6532) and the Message-ID without angle brackets.

    Structure: text only -> text/plain; HTML only -> text/html; both -> multipart/alternative;
    with attachments -> multipart/mixed whose first part is the body. Bcc is never written
    (there is no Bcc argument: Bcc recipients belong to the envelope only).

    Raises :class:`InvalidField` for bad input and :class:`MessageBuildError` if the output
    fails its self-checks.
    """
    if not isinstance(from_, Address):
        raise InvalidField("from", "must be an Address (use parse_address)")
    to = _check_address_list(to, "to")
    cc = _check_address_list(cc, "cc")
    reply_to = _check_address_list(reply_to, "reply_to")
    if subject is not None:
        check_text(subject, "subject")
    text = _body_text(text_body, "text_body")
    html = _body_text(html_body, "html_body")
    if text is None and html is None:
        raise InvalidField("text_body", "text_body or html_body is required")
    if headers is None:
        headers = []
    if not isinstance(headers, (list, tuple)):
        raise InvalidField("headers", "must be a list of (name, value) pairs")
    checked_headers: list[tuple[str, str]] = []
    seen: set[str] = set()
    for pair in headers:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidField("headers", "must be a list of (name, value) pairs")
        name, value = check_header(pair[0], pair[1], "headers")
        if name.lower() in seen:
            raise InvalidField(f"headers.{name}", "is given more than once")
        seen.add(name.lower())
        checked_headers.append((name, value))
    checked_attachments: list[tuple[str, str, bytes]] = []
    for index, item in enumerate(attachments or []):
        field = f"attachments[{index}]"
        if not (isinstance(item, tuple) and len(item) == 3
                and isinstance(item[2], (bytes, bytearray))):
            raise InvalidField(field, "must be a (name, content_type, data) tuple")
        name = _check_attachment_name(item[0], f"{field}.name")
        maintype, subtype = _check_content_type(item[1], f"{field}.content_type")
        checked_attachments.append((name, f"{maintype}/{subtype}", bytes(item[2])))

    domain = _message_id_domain(message_id_domain)
    if message_id is None:
        mid = f"{secrets.token_hex(16)}@{domain}"
    else:
        mid = _clean_message_id(message_id)
    if date is None:
        date = datetime.now(timezone.utc)
    elif not isinstance(date, datetime):
        raise InvalidField("date", "must be a datetime")
    elif date.tzinfo is None:
        date = date.replace(tzinfo=timezone.utc)

    # Internationalized mail (a mailbox with a non-ASCII local part, RFC 6531): the address
    # fields are UTF-8 (RFC 6532: an address cannot be RFC 2047-encoded); display names,
    # Subject and every other field stay ASCII as always, the body 7-bit.
    utf8 = any(a.smtputf8 for a in [from_, *to, *cc, *reply_to])
    address_fields = [(name, addresses) for name, addresses in (
        ("From", [from_]), ("Reply-To", reply_to), ("To", to), ("Cc", cc)) if addresses]

    def build(force_base64: bool) -> bytes:
        msg = EmailMessage(policy=_POLICY)
        msg["Date"] = _date_header(date)
        if not utf8:  # (else written below, where the email package's 7-bit policy cannot)
            for name, addresses in address_fields:
                msg.set_raw(name, _address_header(name, addresses))
        if subject is not None:
            chunks = unstructured_chunks("Subject", subject, raw_ascii=False)
            msg.set_raw("Subject", fold("Subject", chunks))
        msg["Message-ID"] = f"<{mid}>"
        msg["MIME-Version"] = "1.0"
        for name, value in checked_headers:
            msg.set_raw(name, fold(name, unstructured_chunks(name, value, raw_ascii=True)))

        bodies = [(content, subtype) for content, subtype in ((text, "plain"), (html, "html"))
                  if content is not None]
        if checked_attachments:
            msg.make_mixed()
            if len(bodies) == 2:
                alternative = MIMEPart(policy=_POLICY)
                alternative.make_alternative()
                for content, subtype in bodies:
                    alternative.attach(_text_part(content, subtype, force_base64))
                msg.attach(alternative)
            else:
                msg.attach(_text_part(*bodies[0], force_base64))
            for name, content_type, data in checked_attachments:
                msg.attach(_attachment_part(name, content_type, data))
        elif len(bodies) == 2:
            msg.make_alternative()
            for content, subtype in bodies:
                msg.attach(_text_part(content, subtype, force_base64))
        else:
            content, subtype = bodies[0]
            msg.set_content(
                content, subtype=subtype, charset="utf-8", cte=_choose_cte(content, force_base64)
            )
        out = normalize_line_endings(msg.as_bytes(policy=_POLICY))
        if utf8:  # after the Date line: the order _single_part_head writes
            after_date = out.index(b"\r\n") + 2
            fields = "".join(f"{name}: {_address_header(name, addresses)}\r\n"
                             for name, addresses in address_fields)
            out = out[:after_date] + fields.encode("utf-8") + out[after_date:]
        return out

    # One body part and no attachment (the common transactional mail): write the bytes the
    # email package would write, without its header objects (tests prove them identical).
    single = not checked_attachments and (text is None) != (html is None)
    if single and _FAST_SINGLE_PART and len(f"Message-ID: <{mid}>") <= SOFT_LINE:
        content, subtype = (text, "plain") if text is not None else (html, "html")
        head = _single_part_head(date, from_, reply_to, to, cc, subject, mid, checked_headers)

        def build(force_base64: bool) -> bytes:  # noqa: F811  (the fast twin of build above)
            return _single_part(head, content, subtype, force_base64)

    raw = build(force_base64=False)
    if b"\r\n.\r\n" in raw:
        # A body line (or the tail of a quoted-printable soft break) is a lone dot: base64
        # cannot produce one.
        raw = build(force_base64=True)
    check_wire_format(raw, utf8_headers=utf8)
    verify = dict(from_=from_, to=to, cc=cc, reply_to=reply_to, subject=subject,
                  header_names=[name for name, _ in checked_headers], message_id=mid)
    if not verify_built_cheap(raw, **verify):
        verify_built(raw, **verify)
    return raw, mid


_FAST_SINGLE_PART = True  # tests switch it off to compare both builders


def _date_header(date) -> str:
    """The Date field's value (RFC 5322: to the second). A batch's messages share their
    second: formatting it once spares ~1% of the intake's CPU."""
    return _formatted_second(date.replace(microsecond=0))


@functools.lru_cache(maxsize=64)
def _formatted_second(date) -> str:
    return format_datetime(date)


def _single_part_head(date, from_, reply_to, to, cc, subject, mid, headers) -> bytes:
    """The header block build() writes for a single-part message, up to (excluding) the
    Content-Type line, in the same order and with the same folding."""
    lines = [f"Date: {_date_header(date)}", f"From: {_address_header('From', [from_])}"]
    for name, addresses in (("Reply-To", reply_to), ("To", to), ("Cc", cc)):
        if addresses:
            lines.append(f"{name}: {_address_header(name, addresses)}")
    if subject is not None:
        lines.append(f"Subject: {fold('Subject', unstructured_chunks('Subject', subject, raw_ascii=False))}")
    lines += [f"Message-ID: <{mid}>", "MIME-Version: 1.0"]
    for name, value in headers:
        lines.append(f"{name}: {fold(name, unstructured_chunks(name, value, raw_ascii=True))}")
    return "\r\n".join(lines).encode("utf-8") + b"\r\n"  # ASCII unless an address is not


def _single_part(head: bytes, content: str, subtype: str, force_base64: bool) -> bytes:
    # (head ends with a CRLF: normalising it and the part apart is normalising the whole)
    if len(content) <= _PART_MEMO_MAX:
        return normalize_line_endings(head) + _memo_part(content, subtype, force_base64)
    return normalize_line_endings(head) + _part(content, subtype, force_base64)


def _part(content: str, subtype: str, force_base64: bool) -> bytes:
    """A single-part message's Content-Type, Content-Transfer-Encoding and encoded body."""
    cte = _choose_cte(content, force_base64)
    _, payload = _encode_text(content, "utf-8", cte, _POLICY)  # the email package's encoder
    return normalize_line_endings(
        f'Content-Type: text/{subtype}; charset="utf-8"\r\n'
        f"Content-Transfer-Encoding: {cte}\r\n\r\n".encode("ascii") + payload.encode("ascii"))


# A batch's entries (and a template's sends) mostly share their body: it is encoded once,
# while small enough to keep a few of (the cache holds at most 16 x 64K characters).
_PART_MEMO_MAX = 64 * 1024
_memo_part = functools.lru_cache(maxsize=16)(_part)
