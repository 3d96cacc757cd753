"""The submission service: the only way into the sending pipeline (HTTP and SMTP alike).

``submit`` (a SendRequest) and ``submit_raw`` (an RFC 5322 message from the SMTP gateway) do
the same steps: refuse a suspended server, authorize the From domain (a verified domain of
the server), validate and build (or normalise) the message, enforce the size limit, store the
raw source ONCE in a Submission row, create one Message row per distinct recipient (to, cc,
bcc), hold suppressed recipients (status Held + MessageHeld) and enqueue a wake-up for the
others after commit. A queue message carries only the Message id, never a body.

Work is split in two phases so that a batch validates every entry on its own and then writes
all valid entries in bulk: ``prepare`` (validation + MIME, raises ServiceError) and ``store``.

Why one module of ~570 lines: it is the one door into the pipeline, and the HTTP and SMTP
paths share every check in it (From and originator authorization, size, tag, schedule,
the per-recipient context query); split in two, each half would import the other's checks.
"""
from __future__ import annotations

import functools
import re
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors, observability, queues, statuses
from chalicelib.db import after_commit
from chalicelib.config import get_settings
from chalicelib.db.models import Domain, Message, Server, Stream, Suppression
from chalicelib.response_shapes.messaging import KEPT_SEND_FIELDS
from chalicelib.services.domains import manage
from chalicelib.services.messages import captured, events
from chalicelib.services import mime
from chalicelib.services.mime import lines as mime_lines
from chalicelib.services.sending import limits, store as submission_store
from chalicelib.services.suppressions import entries as suppressions
from chalicelib.services.tracking import engagement

MAX_RECIPIENTS = 1000
MAX_TAG = 255
MAX_SCHEDULE_DAYS = 30
SUPPRESSED_DETAILS = "the recipient is on the suppression list"
DEVELOPMENT_DETAILS = "server in development mode"


@dataclass
class Prepared:
    """A validated submission, ready to be stored."""

    raw: bytes
    message_id_header: str | None
    mail_from: str
    domain: Domain
    recipients: list[str]
    subject: str | None
    # The request's fields kept as given (response_shapes.messaging.KeptSendFields), by name:
    # each lands in the messages column of the same name.
    kept: dict[str, Any]
    metadata: Any
    stream: Stream | None
    has_html: bool
    # Per-message tracking override (None: follow the server's and domain's settings): the
    # request fields and the X-Track header, resolved by services/tracking.resolve_flags.
    track_opens: bool | None = None
    track_clicks: bool | None = None
    track_header: str | None = None
    # False when the lookups already showed no recipient is suppressed (store skips its query).
    maybe_held: bool = True
    # When to send (naive UTC); None or not in the future: now. See check_send_at.
    send_at: datetime | None = None


def _invalid(exc: mime.InvalidField) -> errors.ValidationError:
    return errors.ValidationError(f"{exc.field} {exc.message}", field=exc.field)


def check_can_send(server: Server) -> None:
    if server.suspended:
        reason = f": {server.suspension_reason}" if server.suspension_reason else ""
        raise errors.ServerSuspended(f"this server is suspended and cannot send mail{reason}")


def _stream_condition(server_id, permalink):
    if permalink is None:
        return and_(Stream.server_id == server_id, Stream.is_default.is_(True),
                    Stream.archived_at.is_(None))
    return and_(Stream.server_id == server_id, Stream.permalink == permalink)


@functools.lru_cache(maxsize=None)
def _context_statement(named_stream: bool, entities: tuple):
    """The context SELECT for one shape, built once with bind parameters: building the
    expression took longer than its round trip on every send."""
    server_id = bindparam("server_id")
    stream_id = (select(Stream.id)
                 .where(_stream_condition(server_id, bindparam("permalink") if named_stream
                                          else None))
                 .order_by(Stream.id).limit(1).scalar_subquery())
    maybe_held = select(Suppression.id).where(
        Suppression.server_id == server_id,
        Suppression.address.in_(bindparam("recipients", expanding=True)),
        or_(Suppression.expires_at.is_(None), Suppression.expires_at > bindparam("now"))).exists()
    return (select(*entities, Domain, Stream, maybe_held.label("maybe_held"))
            .select_from(Server)
            .outerjoin(Domain, and_(Domain.server_id == Server.id,
                                    Domain.name == bindparam("domain"),
                                    Domain.verified_at.is_not(None)))
            .outerjoin(Stream, Stream.id == stream_id)
            .where(Server.id == server_id).limit(1))


def _context_row(db: Session, server_id: int, address: mime.Address, permalink: str | None,
                 recipients: list[str], *entities):
    """``entities``, the From domain's verified Domain, the Stream and the suppression probe,
    from the server's row (one round trip); None when the server is gone."""
    params = {"server_id": server_id, "domain": address.domain.lower(), "now": clock.now(),
              # an entry may hold the address or its hash (entries.lookup_forms)
              "recipients": sorted({f for r in recipients
                                    for f in suppressions.lookup_forms(r)}) or [""]}
    if permalink is not None:
        params["permalink"] = permalink
    return db.execute(_context_statement(permalink is not None, entities), params).first()


def _context(db: Session, server: Server, address: mime.Address, permalink: str | None,
             recipients: list[str], cache: dict | None) -> tuple[Domain | None, Any, bool]:
    """The From domain's verified Domain row, the Stream (or None), and whether any of
    ``recipients`` may be suppressed -- in ONE round trip (the cache serves a batch's repeats,
    which then leaves the suppression check to store's single query)."""
    dkey, skey = ("domain", address.domain.lower()), ("stream", permalink)
    if cache is not None and dkey in cache and skey in cache:
        return cache[dkey], cache[skey], True
    row = _context_row(db, server.id, address, permalink, recipients)
    if row is None:  # deleted since the request authenticated
        raise errors.NotFound("this server no longer exists")
    if cache is not None:
        cache[dkey], cache[skey] = row.Domain, row.Stream
    return row.Domain, row.Stream, bool(row.maybe_held)


def authorize_from(db: Session, server: Server, address: mime.Address, field: str = "from",
                   cache: dict | None = None, domain: Any = False) -> Domain:
    key = ("domain", address.domain)
    if domain is not False:
        pass  # already looked up (by _context)
    elif cache is not None and key in cache:
        domain = cache[key]
    else:
        domain = manage.verified_domain_for(db, server, address.domain)
        if cache is not None:
            cache[key] = domain
    if domain is None:
        raise errors.ValidationError(
            f"{field}: {address.domain} is not a verified sending domain of this server",
            field=field)
    return domain


_ORIGINATOR_HEADERS = {"sender": "Sender", "resent-from": "Resent-From",
                       "resent-sender": "Resent-Sender"}


def _authorize_originators(db: Session, server: Server, originators, from_domain: Domain) -> None:
    """A raw message's other originator headers must name a verified domain of the server too:
    receivers display them ("sent by ... on behalf of"), and the message goes out signed with
    the From domain's key, so a foreign one would be a forgery carrying our signature."""
    for field, address in originators:
        if address.domain.lower() == from_domain.name.lower():
            continue
        if manage.verified_domain_for(db, server, address.domain) is None:
            raise errors.ValidationError(
                f"{field}: the {_ORIGINATOR_HEADERS[field]} header's domain {address.domain} is "
                f"not a verified sending domain of this server", field=field)


def _check_stream(stream: Stream | None, permalink: str | None) -> Stream | None:
    if permalink is None:
        return stream
    if stream is None:
        raise errors.ValidationError(f"stream: no stream {permalink!r} on this server",
                                     field="stream")
    if stream.archived_at is not None:
        raise errors.ValidationError(f"stream: the stream {permalink!r} is archived",
                                     field="stream")
    return stream


def _check_size(size: int, field: str, limit: int | None = None) -> None:
    limit = limit if limit is not None else get_settings().smtp_server_max_message_size
    if size > limit:
        raise errors.ValidationError(
            f"{field}: the message is {size} bytes, more than smtp_server.max_message_size "
            f"({limit} bytes)", field=field)


def _check_tag(tag: Any) -> str | None:
    if tag is None:
        return None
    if not isinstance(tag, str) or len(tag) > MAX_TAG or any(c in tag for c in "\r\n\0"):
        raise errors.ValidationError(f"tag: must be a string of at most {MAX_TAG} characters "
                                     "without line breaks", field="tag")
    return tag


def check_send_at(value: datetime | None) -> datetime | None:
    """``send_at`` as naive UTC: None (or a past or present moment) means now; a moment more
    than MAX_SCHEDULE_DAYS ahead, or one without a UTC offset, is a 422 naming it."""
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise errors.ValidationError("send_at: must be an RFC 3339 date-time with a time zone "
                                     "offset, e.g. 2030-01-01T09:00:00Z", field="send_at")
    try:
        moment = value.astimezone(timezone.utc).replace(tzinfo=None)
    except (OverflowError, ValueError):  # e.g. 9999-12-31T23:00:00-05:00
        raise errors.ValidationError("send_at: out of range", field="send_at") from None
    now = clock.now()
    if moment <= now:
        return None
    if moment > now + timedelta(days=MAX_SCHEDULE_DAYS):
        raise errors.ValidationError(
            f"send_at: at most {MAX_SCHEDULE_DAYS} days ahead (until "
            f"{(now + timedelta(days=MAX_SCHEDULE_DAYS)).replace(microsecond=0).isoformat()}Z)",
            field="send_at")
    return moment


def _distinct(addresses: list[str]) -> list[str]:
    seen: set[str] = set()
    result = []
    for address in addresses:
        if address.lower() not in seen:
            seen.add(address.lower())
            result.append(address)
    if not result:
        raise errors.ValidationError("to: at least one recipient is required", field="to")
    if len(result) > MAX_RECIPIENTS:
        raise errors.ValidationError(f"to: at most {MAX_RECIPIENTS} recipients per message",
                                     field="to")
    return result


def _dump(value: Any) -> Any:
    return value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value


def prepare(db: Session, server: Server, request, *, cache: dict | None = None) -> Prepared:
    """Validate a SendRequest and build its message. Raises ServiceError naming the field."""
    try:
        from_ = mime.parse_address(_dump(request.from_), "from")
        to = mime.parse_address_list([_dump(a) for a in request.to or []], "to")
        cc = mime.parse_address_list([_dump(a) for a in request.cc or []], "cc")
        bcc = mime.parse_address_list([_dump(a) for a in request.bcc or []], "bcc")
        reply_to = mime.parse_address_list([_dump(a) for a in request.reply_to or []],
                                           "reply_to")
        headers = mime.validate_custom_headers(request.headers or {})
    except mime.InvalidField as exc:
        raise _invalid(exc) from None
    try:
        recipients, bad_recipients = _distinct([a.email for a in to + cc + bcc]), None
    except errors.ServiceError as exc:
        recipients, bad_recipients = [], exc
    domain, stream, maybe_held = _context(db, server, from_, request.stream, recipients, cache)
    domain = authorize_from(db, server, from_, domain=domain)
    if bad_recipients is not None:
        raise bad_recipients
    _check_tag(request.tag)  # line breaks: SendRequest checks only the length
    stream = _check_stream(stream, request.stream)
    send_at = check_send_at(getattr(request, "send_at", None))
    limit = get_settings().smtp_server_max_message_size
    try:
        attachments = []
        total = 0
        for index, attachment in enumerate(request.attachments or []):
            decoded = mime.decode_attachment(_dump(attachment), index)
            total += len(decoded[2])
            if total > limit:  # fail before building something huge
                _check_size(total, f"attachments[{index}]", limit)
            attachments.append(decoded)
        raw, message_id = mime.build_message(
            from_=from_, to=to, cc=cc, reply_to=reply_to, subject=request.subject,
            text_body=request.text_body, html_body=request.html_body, headers=headers,
            attachments=attachments, message_id_domain=domain.name)
    except mime.InvalidField as exc:
        raise _invalid(exc) from None
    except mime.MessageBuildError as exc:
        raise errors.ValidationError(f"body: the message could not be built safely: {exc}",
                                     field="body") from None
    _check_size(len(raw), "attachments" if attachments else "body", limit)
    return Prepared(raw=raw, message_id_header=message_id, mail_from=from_.email, domain=domain,
                    recipients=recipients, subject=request.subject,
                    kept={name: getattr(request, name, None) for name in KEPT_SEND_FIELDS},
                    metadata=request.metadata, stream=stream,
                    has_html=request.html_body is not None,
                    track_opens=getattr(request, "track_opens", None),
                    track_clicks=getattr(request, "track_clicks", None),
                    track_header=_track_header(headers), maybe_held=maybe_held,
                    send_at=send_at)


_HTML_PART = re.compile(rb"(?im)^content-type:[ \t]*text/html")
_HEADER_END = b"\r\n\r\n"


def _ensure_header(raw: bytes, name: bytes, value: Callable[[], bytes]) -> bytes:
    """``raw`` with a ``name`` header unless it has one, added at the end of the header
    block (as Postfix's cleanup does: the trace fields stay on top); ``value()`` makes its
    value, only when the header is missing."""
    end = mime.header_block_end(raw)
    if re.search(rb"(?im)^" + re.escape(name) + rb":", raw[:end]):
        return raw
    return raw[:end] + name + b": " + value() + b"\r\n" + raw[end:]


@dataclass
class ParsedRaw:
    """An SMTP submission checked without the database (``parse_raw``)."""

    raw: bytes
    sender: mime.Address  # the From header's mailbox
    subject: str | None
    recipients: list[str]
    # Sender, Resent-From and Resent-Sender mailboxes as (field, address): authorized like From.
    originators: tuple = ()
    # The Message-ID header's msg-id (mime.message_id: unfolded, without brackets), or None.
    message_id: str | None = None


SMTPUTF8_NEEDED = ("declare SMTPUTF8 on MAIL FROM (RFC 6531) to send internationalized mail, "
                   "or encode non-ASCII header text as RFC 2047 encoded-words")


def _check_header_text(head: bytes, smtputf8: bool) -> None:
    """The one rule for header text of a submission (the HTTP API writes its own headers by
    it too): ASCII, or UTF-8 (RFC 6532) in a message sent with SMTPUTF8."""
    if head.isascii():
        return
    if not smtputf8:
        raise errors.ValidationError(
            f"headers: the message's header section holds non-ASCII characters: "
            f"{SMTPUTF8_NEEDED}", field="headers")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.ValidationError("headers: the message's header section is not valid "
                                     "UTF-8 (RFC 6532)", field="headers") from None


def parse_raw(*, rcpt_to: list[str], raw: bytes, limit: int | None = None,
              received: bytes = b"", smtputf8: bool = False,
              checked: bool = False, crlf: bool = False) -> ParsedRaw:
    """The database-free half of ``prepare_raw``: line endings, Bcc fields removed, lines over
    998 octets made short (their parts re-encoded; a long header line refused), size, header
    text (ASCII, or UTF-8 with ``smtputf8``: the client declared SMTPUTF8), From/Subject
    headers and recipients. ``received``: the gateway's Received field, put on top.
    ``checked``: ``rcpt_to`` holds addresses as parse_address wrote them (the gateway checked
    them at RCPT TO), not parsed again. ``crlf``: ``raw``'s line ends are all CRLF already
    (the gateway's reader wrote them), not counted again. Raises ServiceError naming the
    field."""
    raw = bytes(raw) if crlf else mime.normalize_line_endings(bytes(raw))
    if not raw.endswith(b"\r\n"):
        raw += b"\r\n"
    # Blind copies: the envelope (rcpt_to) keeps them; no stored or delivered copy shows them.
    raw = received + mime.strip_bcc(raw)
    try:  # lines over 998 octets: their parts re-encoded (mime/lines.py), before signing
        raw = mime_lines.shorten_lines(raw)
    except mime_lines.LineTooLong as exc:
        raise errors.ValidationError(f"message: {exc}", field="message") from None
    _check_size(len(raw), "message", limit)
    head = raw[:mime.header_block_end(raw) + 2]  # only the header block: the body is not read
    _check_header_text(head, smtputf8)
    try:
        info = mime.header_addresses(head)
        recipients = list(rcpt_to) if checked else \
            [mime.parse_address(r, f"rcpt_to[{i}]").email for i, r in enumerate(rcpt_to)]
    except mime.InvalidField as exc:
        raise _invalid(exc) from None
    for index, address in enumerate(recipients):
        if not smtputf8 and not address.isascii():
            raise errors.ValidationError(f"rcpt_to[{index}]: {address} is an internationalized "
                                         f"address: {SMTPUTF8_NEEDED}", field=f"rcpt_to[{index}]")
    originators = ([("sender", info["sender"])] if info["sender"] is not None else []) + \
        info["resent"]
    return ParsedRaw(raw=raw, sender=info["from"], subject=info["subject"],
                     recipients=_distinct(recipients), originators=tuple(originators),
                     message_id=info["message_id"])


def prepare_parsed(db: Session, server: Server, parsed: ParsedRaw, *, tag=None, metadata=None,
                   context: tuple | None = None) -> Prepared:
    """Authorize the From domain (like HTTP) and finish the headers of a parsed message.
    ``context``: the (domain, stream, maybe_held) ``_context`` already looked up."""
    domain, stream, maybe_held = context or _context(db, server, parsed.sender, None,
                                                     parsed.recipients, None)
    domain = authorize_from(db, server, parsed.sender, domain=domain)
    _authorize_originators(db, server, parsed.originators, domain)
    raw = parsed.raw
    # MTAs add these when a client leaves them out; the signature and threading need them.
    raw = _ensure_header(raw, b"Date", lambda: format_datetime(
        clock.now().replace(tzinfo=timezone.utc)).encode())
    generated = f"{secrets.token_hex(16)}@{domain.name}"
    with_id = _ensure_header(raw, b"Message-ID", lambda: f"<{generated}>".encode())
    # Read as feedback reports' copies are read (complaints.py), folded or not.
    message_id = parsed.message_id if with_id is raw else generated
    raw = with_id
    return Prepared(raw=raw, message_id_header=message_id, mail_from=parsed.sender.email,
                    domain=domain, recipients=parsed.recipients, subject=parsed.subject,
                    kept={**dict.fromkeys(KEPT_SEND_FIELDS), "tag": _check_tag(tag)},
                    metadata=metadata, stream=stream, maybe_held=maybe_held,
                    has_html=b"html" in raw.lower() and bool(_HTML_PART.search(raw)),
                    track_header=_raw_header(raw, engagement.CONTROL_HEADER))


def prepare_raw(db: Session, server: Server, *, rcpt_to: list[str], raw: bytes, tag=None,
                metadata=None, smtputf8: bool = False) -> Prepared:
    """Validate an RFC 5322 message submitted over SMTP (From authorized like HTTP)."""
    return prepare_parsed(db, server, parse_raw(rcpt_to=rcpt_to, raw=raw, smtputf8=smtputf8),
                          tag=tag, metadata=metadata)


def _track_header(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        if name.lower() == engagement.CONTROL_HEADER.lower():
            engagement.parse_override(value)  # 422 now rather than at delivery
            return value
    return None


def _raw_header(raw: bytes, name: str) -> str | None:
    head = raw.split(_HEADER_END, 1)[0]
    match = re.search(rb"(?im)^" + re.escape(name.encode()) + rb":[ \t]*([^\r\n]*)", head)
    return match.group(1).decode("ascii", "replace").strip() if match else None


def _tracking(server: Server, p: Prepared) -> tuple[bool, bool]:
    return engagement.resolve_flags(server, p.domain, has_html=p.has_html, header=p.track_header,
                                  track_opens=p.track_opens, track_clicks=p.track_clicks)


def new_token() -> str:
    # Lower-case hex: it is the local part of the return path, which some MTAs lower-case.
    return secrets.token_hex(12)


def store(db: Session, server: Server, prepared: list[Prepared], *,
          source: str) -> list[dict | errors.ServiceError]:
    """Write submissions and per-recipient messages in bulk; returns one SendResult each (or
    the SendLimitExceeded refusing that entry, with ``send_limit_action`` reject).

    Each message starts as: Held when its recipient is suppressed, when the server is in
    Development mode (never delivered; switching to Live does not release it) or when it is
    over a send limit with action hold; Scheduled (``next_attempt_at`` = send_at) when
    ``send_at`` is later than now; Pending otherwise. One multi-row INSERT ... RETURNING for
    the submissions and one for the messages (no ORM unit of work per row), their statistics
    counted in the same transaction, and the queue wake-ups sent together after the commit.
    On PostgreSQL, up to MAX_ROWS messages are written with their submissions and counters in
    one statement (submission_store)."""
    if not prepared:
        return []
    now = clock.now()
    held = set()
    if any(p.maybe_held for p in prepared):
        held = suppressions.suppressed_among(db, server.id,
                                             (r for p in prepared for r in p.recipients))
    development = server.mode == "Development"
    wanted = [0 if development else sum(
        1 for r in p.recipients
        if not suppressions.held(held, r, p.stream.id if p.stream else None))
              for p in prepared]
    refused, budget, admission = limits.admit_entries(db, server, wanted)
    sub_rows, rows, owner, entries = [], [], [], []
    for index, p in enumerate(prepared):
        if index in refused:
            continue
        entries.append(index)
        sub_rows.append(dict(server_id=server.id, message_id_header=p.message_id_header,
                             size=len(p.raw), raw=p.raw, created_at=now))
        opens, clicks = _tracking(server, p)
        subject = p.subject[:998] if p.subject else p.subject
        for rcpt in p.recipients:
            if suppressions.held(held, rcpt, p.stream.id if p.stream else None):
                status, details = statuses.HELD, SUPPRESSED_DETAILS
            elif development:
                status, details = statuses.HELD, DEVELOPMENT_DETAILS
            elif budget is not None and budget <= 0:
                status, details = statuses.HELD, limits.HELD_DETAILS.format(
                    period=admission.period, limit=admission.limit)
            else:
                if budget is not None:
                    budget -= 1
                status, details = (statuses.SCHEDULED, None) if p.send_at else (statuses.PENDING, None)
            owner.append(len(sub_rows) - 1)
            rows.append(dict(
                server_id=server.id, token=new_token(), scope="outgoing",
                rcpt_to=rcpt, mail_from=p.mail_from, subject=subject,
                message_id_header=p.message_id_header, metadata=p.metadata,
                stream_id=p.stream.id if p.stream else None, domain_id=p.domain.id,
                size=len(p.raw), status=status, held=status == statuses.HELD, status_details=details,
                track_opens=opens, track_clicks=clicks, bounce=False,
                next_attempt_at=None if status == statuses.HELD else (p.send_at or now),
                created_at=now, updated_at=now, **p.kept))
    results: list = [limits.exceeded(admission) if index in refused else None
                     for index in range(len(prepared))]
    if not rows:
        return results
    sub_ids, ids = submission_store.store(db, server.id, now, sub_rows, rows, owner)
    # Development mode: never delivered, so kept in the server's captured-mail inbox.
    captured.keep_development(db, server.id, [i for i, row in zip(ids, rows)
                                             if row["status_details"] == DEVELOPMENT_DETAILS])
    held_rows = {i: row for i, row in zip(ids, rows) if row["held"]}
    if held_rows:
        for message in db.scalars(select(Message).where(Message.id.in_(list(held_rows)))
                                  .order_by(Message.id)):
            details = held_rows[message.id]["status_details"]
            if details == SUPPRESSED_DETAILS:
                details = f"{message.rcpt_to} is on the suppression list; not sent"
            events.emit(db, message, "MessageHeld", details)
    for message_id, row in zip(ids, rows):  # sent together after the commit (queues.py)
        if not row["held"]:
            wait = max(0.0, (row["next_attempt_at"] - now).total_seconds())
            queues.enqueue_after_commit(db, queues.DELIVERIES, message_id,
                                        min(wait, queues.SQS_MAX_DELAY))
    for index, sub_id in zip(entries, sub_ids):
        results[index] = {"message_id": sub_id, "recipients": []}
    for row, index, message_id in zip(rows, owner, ids):
        results[entries[index]]["recipients"].append(
            {"rcpt_to": row["rcpt_to"], "id": message_id, "token": row["token"],
             "status": row["status"]})
    after_commit(db, lambda: _observe_accepted(server.id, source, results))
    return results


def _observe_accepted(server_id: int, source: str, results: list) -> None:
    """One log line per accepted submission, once it is committed; the counters."""
    for result in results:
        if not isinstance(result, dict):  # an entry refused by the send limit
            continue
        recipients = result["recipients"]
        held = sum(1 for r in recipients if r["status"] == statuses.HELD)
        observability.count("accepted", len(recipients))
        observability.count("held", held)
        observability.log("submission.accepted", submission_id=result["message_id"],
                          server_id=server_id, source=source, recipients=len(recipients),
                          held=held, messages=[r["id"] for r in recipients])


def _one(result: dict | errors.ServiceError) -> dict:
    if isinstance(result, errors.ServiceError):
        raise result
    return result


def submit(db: Session, server: Server, request, *, source: str = "api") -> dict:
    """Accept one SendRequest; returns the SendResult data."""
    check_can_send(server)
    return _one(store(db, server, [prepare(db, server, request)], source=source)[0])


def submit_raw(db: Session, server: Server, *, mail_from: str, rcpt_to: list[str], raw: bytes,
               source: str = "smtp", tag=None, metadata=None, smtputf8: bool = False) -> dict:
    """Accept an already-built RFC 5322 message (the SMTP gateway). ``mail_from`` is the SMTP
    envelope sender; the pipeline sets its own return path, so it is only informative.
    ``smtputf8``: the client declared SMTPUTF8 (UTF-8 headers and addresses allowed)."""
    check_can_send(server)
    prepared = prepare_raw(db, server, rcpt_to=rcpt_to, raw=raw, tag=tag, metadata=metadata,
                           smtputf8=smtputf8)
    return _one(store(db, server, [prepared], source=source)[0])


def submit_parsed_many(db: Session, server_id: int, parsed: list[ParsedRaw], *,
                       source: str = "smtp") -> list[dict | errors.ServiceError]:
    """Accept many parsed SMTP submissions of one server in one go (the gateway's group
    commit): the server, its From domain, default stream and suppression probe over all the
    batch's recipients in one query per From domain, then ``store``'s bulk statements. Returns
    per entry its SendResult data or the ServiceError refusing it; refusals are raised by
    Python checks after their query succeeded, so the transaction stays usable for the
    others."""
    if not parsed:
        return []
    by_domain: dict[str, tuple] = {}
    for entry in parsed:
        by_domain.setdefault(entry.sender.domain.lower(), (entry.sender, []))[1].extend(
            entry.recipients)
    server, contexts = None, {}
    for name, (sender, recipients) in by_domain.items():
        row = _context_row(db, server_id, sender, None, recipients, Server)
        if row is None or row.Server.suspended:
            return [errors.ServerSuspended("this server is suspended and cannot send mail")
                    ] * len(parsed)
        server = row.Server
        contexts[name] = (row.Domain, row.Stream, bool(row.maybe_held))
    results: list[dict | errors.ServiceError | None] = []
    valid: list[tuple[int, Prepared]] = []
    for index, entry in enumerate(parsed):
        try:
            context = contexts[entry.sender.domain.lower()]
            valid.append((index, prepare_parsed(db, server, entry, context=context)))
            results.append(None)
        except errors.ServiceError as exc:
            results.append(exc)
    for (index, _), data in zip(valid, store(db, server, [p for _, p in valid], source=source)):
        results[index] = data
    return results


def submit_batch(db: Session, server: Server, requests: list, *, source: str = "api",
                 parse=None) -> list[dict]:
    """Accept many entries; one result per entry (``{"status": "success", "data": ...}`` or
    ``{"status": "error", "error": {...}}``). A failing entry does not affect the others.
    ``parse(entry)`` turns a raw entry into a request (raising ServiceError)."""
    check_can_send(server)
    cache: dict = {}
    results: list[dict | None] = []
    valid: list[tuple[int, Prepared]] = []
    for index, entry in enumerate(requests):
        try:
            request = parse(entry) if parse else entry
            valid.append((index, prepare(db, server, request, cache=cache)))
            results.append(None)
        except errors.ServiceError as exc:
            error = {"code": exc.code, "message": exc.message}
            if exc.field:
                error["field"] = exc.field
            results.append({"index": index, "status": "error", "error": error})
    stored = store(db, server, [p for _, p in valid], source=source)
    for (index, _), data in zip(valid, stored):
        if isinstance(data, errors.ServiceError):
            results[index] = {"index": index, "status": "error",
                              "error": {"code": data.code, "message": data.message}}
        else:
            results[index] = {"index": index, "status": "success", "data": data}
    return results
