"""Shared by the tracking and stats tests: the tenant's Server row and Message rows made
directly (the bucket tests need exact times), and pulling tracking URLs out of sent HTML."""
from __future__ import annotations

import re
from datetime import datetime
from email import message_from_bytes, policy

from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.base import new_token
from chalicelib.db.models import Message, Organization, Server, Stream
from tests.support import all_tenants


def server_id(tenant) -> int:
    with all_tenants() as db:
        return db.scalar(select(Server.id).join(Organization)
                         .where(Organization.permalink == tenant.org,
                                Server.permalink == tenant.server))


def default_stream_id(sid: int) -> int:
    with all_tenants() as db:
        return db.scalar(select(Stream.id).where(Stream.server_id == sid,
                                                 Stream.is_default.is_(True)))


def make_message(db, sid: int, *, created_at: datetime | None = None, status: str = "Sent",
                 scope: str = "outgoing", tag: str | None = None, stream_id: int | None = None,
                 bounce: bool = False, held: bool = False, track: bool = True,
                 sent_at: datetime | None = None) -> Message:
    at = created_at or clock.now()
    message = Message(server_id=sid, token=new_token(24), scope=scope, rcpt_to="rcpt@example.net",
                      mail_from="sender@example.com", subject="hello", tag=tag,
                      stream_id=stream_id, status=status, bounce=bounce, held=held,
                      track_opens=track, track_clicks=track, sent_at=sent_at,
                      created_at=at, updated_at=at)
    db.add(message)
    db.flush()
    return message


HTML_MESSAGE = (
    "From: sender@example.com\r\nTo: rcpt@example.net\r\nSubject: hello\r\n"
    "X-Track: all\r\nMIME-Version: 1.0\r\n"
    'Content-Type: multipart/alternative; boundary="b1"\r\n\r\n'
    "--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    "Visit https://example.org/plain\r\n"
    "--b1\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    '<html><body><p><a href="https://example.org/page?a=1&amp;b=2">one</a> '
    '<a href="mailto:someone@example.org">mail</a> <a href="#top">top</a> '
    '<a href="https://example.org/skip" data-no-track>skip</a> '
    '<a href="https://example.org/page?a=1&amp;b=2">again</a></p></body></html>\r\n'
    "--b1--\r\n").encode()


def html_and_text(raw: bytes) -> tuple[str, str]:
    msg = message_from_bytes(raw, policy=policy.default)
    html = msg.get_body(("html",)).get_content()
    text = msg.get_body(("plain",)).get_content()
    return html, text


def tracking_urls(html: str) -> tuple[list[str], list[str]]:
    """(click URLs in document order, pixel URLs)."""
    clicks = re.findall(r'href="([^"]*/t/c/[^"]*)"', html)
    pixels = re.findall(r'src="([^"]*/t/o/[^"]*)"', html)
    return clicks, pixels
