"""Open and click tracking (issue: tracking). ``prepare_outgoing`` is the delivery pipeline's
tracking step: given a message and its raw source, return the bytes to sign and send.

Tokens
- A click token is 192 random bits stored on a ``TrackedLink`` row: the redirect target is
  that row's URL, never anything from the request, so ``/t/c/...`` is no open redirect, and a
  token that is not in the table (tampered, guessed) is a 404.
- An open token is ``<message id>.<HMAC-SHA256 of it, 128 bits>`` under a key derived from
  the installation signing key: no row per message, and any change to either half is a 404.
  Replacing the signing key invalidates the pixels of mail already sent (clicks keep working).

Switches: a message is tracked when its server and its From domain both track (both default
on), unless the message overrides it: SendRequest fields ``track_opens``/``track_clicks`` or
the header ``X-Track: none|opens|clicks|all`` (removed before the message leaves). Only HTML
parts are rewritten; the plain-text part never is.
"""
from __future__ import annotations

import re
import secrets

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db import tenancy
from chalicelib.db.models import ClickEvent, Message, OpenEvent, TrackedLink
from chalicelib.services.security import signed_ids
from chalicelib.services.tracking import detect

CONTROL_HEADER = "X-Track"
OVERRIDES = {"none": (False, False), "opens": (True, False), "clicks": (False, True),
             "all": (True, True)}
_LINK_TOKEN = re.compile(r"^[A-Za-z0-9_-]{32}$")


# --- switches ------------------------------------------------------------------------------

def parse_override(value: str | None) -> tuple[bool, bool] | None:
    """The ``X-Track`` header's value as (opens, clicks); None when absent."""
    if value is None:
        return None
    choice = value.strip().lower()
    if choice not in OVERRIDES:
        raise errors.ValidationError(
            f"headers.{CONTROL_HEADER}: must be one of none, opens, clicks, all",
            field=f"headers.{CONTROL_HEADER}")
    return OVERRIDES[choice]


def resolve_flags(server, domain=None, *, has_html: bool = True, header: str | None = None,
                  track_opens: bool | None = None,
                  track_clicks: bool | None = None) -> tuple[bool, bool]:
    """(track_opens, track_clicks) for one message, computed at submission: server and domain
    settings, then the X-Track header, then explicit request fields (most specific wins)."""
    if not has_html:
        return False, False  # nothing to rewrite: text parts are never tracked
    opens = bool(server.track_opens) and (domain is None or bool(domain.track_opens))
    clicks = bool(server.track_clicks) and (domain is None or bool(domain.track_clicks))
    override = parse_override(header)
    if override is not None:
        opens, clicks = override
    if track_opens is not None:
        opens = track_opens
    if track_clicks is not None:
        clicks = track_clicks
    return opens, clicks


def strip_header(raw: bytes, name: str = CONTROL_HEADER) -> bytes:
    """Remove every ``name:`` header field (with its folded lines) from the header block."""
    end = raw.find(b"\r\n\r\n")
    sep = b"\r\n"
    if end < 0:
        end, sep = raw.find(b"\n\n"), b"\n"
        if end < 0:
            return raw
    head, rest = raw[:end], raw[end:]
    prefix = name.lower().encode() + b":"
    kept, dropping, changed = [], False, False
    for line in head.split(sep):
        if line[:1] in (b" ", b"\t"):  # a folded continuation of the previous field
            if dropping:
                continue
        else:
            dropping = line.lower().startswith(prefix)
            if dropping:
                changed = True
                continue
        kept.append(line)
    return sep.join(kept) + rest if changed else raw


# --- tokens --------------------------------------------------------------------------------

# Opens are counted by message: the pixel's token is the message id, signed.
OPEN_TOKENS = signed_ids.SignedIds("open", "email-service/tracking-open/v1")


def open_token(message_id: int) -> str:
    return OPEN_TOKENS.token(message_id)


def message_id_from_open_token(token: str) -> int | None:
    return OPEN_TOKENS.verify(token)


def new_link_token() -> str:
    return secrets.token_urlsafe(24)  # 32 characters, 192 bits


def tracking_base(host: str | None = None) -> str:
    """Where tracking links point: PUBLIC_URL, or a domain's verified tracking host with
    PUBLIC_URL's scheme, port and path (that host is a CNAME to TRACKING_DOMAIN, which serves
    /t/ whatever the Host header says)."""
    public = get_settings().effective_public_url
    if not host:
        return public + "/t"
    from urllib.parse import urlsplit

    parts = urlsplit(public)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}/t"


def domain_tracking_host(db: Session, domain_id: int | None) -> str | None:
    """``<tracking_host>.<name>`` of the message's From domain once its CNAME is verified."""
    if domain_id is None:
        return None
    from chalicelib.db.models import Domain

    return db.scalar(select(Domain.tracking_host + "." + Domain.name).where(
        Domain.id == domain_id, Domain.tracking_host.is_not(None),
        Domain.tracking_verified_at.is_not(None)))


def pixel_url(message_id: int, base: str | None = None) -> str:
    return f"{base or tracking_base()}/o/{open_token(message_id)}"


def click_url(token: str, base: str | None = None) -> str:
    return f"{base or tracking_base()}/c/{token}"


# --- the delivery pipeline's step ----------------------------------------------------------

def prepare_outgoing(db: Session, message: Message, raw: bytes) -> bytes:
    """Rewrite links and add the open pixel when the message is tracked. Calling it again for
    the same message (a retry) reuses the links already stored, so tokens stay stable."""
    raw = strip_header(raw)
    if not (message.track_opens or message.track_clicks):
        return raw
    base = tracking_base(domain_tracking_host(db, message.domain_id))
    ours = (base + "/", tracking_base() + "/")
    links = {link.url: link for link in db.scalars(
        select(TrackedLink).where(TrackedLink.message_id == message.id))}

    def link_url(url: str) -> str | None:
        if not message.track_clicks or url.startswith(ours):
            return None  # already a tracking URL: never wrap twice
        link = links.get(url)
        if link is None:
            link = links[url] = TrackedLink(message_id=message.id, token=new_link_token(),
                                            url=url)
            db.add(link)
        return click_url(link.token, base)

    # The HTML rewriter (and the email parser it uses) is imported on first use, not at cold start.
    from chalicelib.services.tracking.rewrite import apply_tracking

    out = apply_tracking(raw, link_url=link_url,
                         pixel_url=pixel_url(message.id, base) if message.track_opens else None)
    db.flush()
    return out


# --- recording events ----------------------------------------------------------------------

def _verdict(kind: str, message: Message, ip: str | None, user_agent: str | None,
             method: str) -> detect.Verdict:
    return detect.classify(
        kind=kind, user_agent=user_agent, ip=ip, method=method,
        sent_at=message.sent_at or message.last_attempt_at, at=clock.now(),
        machine_seconds=get_settings().tracking_machine_seconds)


def _bump(db: Session, message_id: int, column) -> bool:
    """Count one more; True when it is the message's first. One atomic UPDATE ... RETURNING,
    so concurrent opens neither lose a count nor both claim to be the first."""
    count = db.execute(update(Message).where(Message.id == message_id)
                       .values({column: column + 1, Message.updated_at: Message.updated_at})
                       .returning(column)
                       .execution_options(synchronize_session=False)).scalar_one()
    return count == 1


def _tracked(db: Session, find) -> tuple:
    """The token names its message across tenants ("tracking", db/tenancy.py); the event is
    then recorded acting for the message's server. ``find()`` -> (message or None, link)."""
    with tenancy.across_tenants(db, "tracking"):
        message, link = find()
    if message is None:
        raise errors.NotFound("unknown tracking token")
    tenancy.act(db, tenancy.for_server(message.server_id))
    return message, link


def record_open(db: Session, token: str, *, ip: str | None, user_agent: str | None,
                method: str = "GET") -> OpenEvent:
    message_id = message_id_from_open_token(token)
    message, _ = _tracked(db, lambda: (
        db.get(Message, message_id) if message_id is not None else None, None))
    verdict = _verdict("open", message, ip, user_agent, method)
    first = _bump(db, message.id, Message.opens_count)
    event = OpenEvent(message_id=message.id, server_id=message.server_id, first=first,
                      ip_address=ip and ip[:64], user_agent=user_agent and user_agent[:512],
                      stream_id=message.stream_id, tag=message.tag, likely_machine=verdict.likely_machine,
                      detection=verdict.detection, created_at=clock.now())
    db.add(event)
    db.flush()
    return event


def record_click(db: Session, token: str, *, ip: str | None, user_agent: str | None,
                 method: str = "GET") -> ClickEvent:
    """Record the click; the caller redirects to ``event.url`` (the stored link's URL)."""
    def find():
        link = db.scalar(select(TrackedLink).where(TrackedLink.token == token)) \
            if _LINK_TOKEN.match(token or "") else None
        return (db.get(Message, link.message_id) if link is not None else None), link

    message, link = _tracked(db, find)
    verdict = _verdict("click", message, ip, user_agent, method)
    first = _bump(db, message.id, Message.clicks_count)
    event = ClickEvent(message_id=message.id, server_id=message.server_id, link_id=link.id,
                       first=first, url=link.url, ip_address=ip and ip[:64],
                       user_agent=user_agent and user_agent[:512], stream_id=message.stream_id,
                       tag=message.tag, likely_machine=verdict.likely_machine,
                       detection=verdict.detection, created_at=clock.now())
    db.add(event)
    db.flush()
    return event
