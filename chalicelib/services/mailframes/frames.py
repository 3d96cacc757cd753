"""Issuing and serving mail frames. ``issue`` builds the HTML for an authorized caller and
holds it for TTL; the URL it answers carries the row's signed id (services/security/
signed_ids.py), so a guessed or altered URL is refused without a lookup and a frame of one
server is never reachable from another's id. A server's expired rows are deleted whenever it
issues a frame (a frame is asked for on every pause of a preview's typing), and every
server's by the hourly retention run (services/messages/retention.py), so the table stays
small.

Serving is public (an ``<iframe>`` sends no credential): the signed id names the row before
anyone is known, so ``html`` reads it across tenants (db/tenancy.py, "mail-frame"), that one
row only."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.db import tenancy
from chalicelib.db.models import MailFrame, Server
from chalicelib.services.mailframes import kinds
from chalicelib.services.security import signed_ids

# Long enough for a frame to load (and be reloaded while someone reads it), short enough
# that a URL copied out of the page soon stops working. The console asks for a new one on
# every change it shows.
TTL = timedelta(minutes=10)
TOKENS = signed_ids.SignedIds("mail-frame", "email-service/mail-frame/v1")
# Where the frames are served (api/public/mail_frames.py), outside /api/ (not the envelope).
PATH_PREFIX = "/mail-frames/"


def issue(db: Session, server: Server, kind: str, ref: str | None,
          parts: dict[str, Any] | None) -> MailFrame:
    """A new frame of ``kind`` for ``server``; the kind's builder checks ``ref`` and
    ``parts`` and raises what a caller can act on (kinds.py)."""
    build = kinds.KINDS.get(kind)
    if build is None:
        raise errors.ValidationError(
            f"kind: must be one of {', '.join(sorted(kinds.KINDS))}", field="kind")
    html = build(db, server, ref, parts or {})
    now = clock.now()
    db.execute(delete(MailFrame).where(MailFrame.expires_at < now))
    frame = MailFrame(organization_id=server.organization_id, server_id=server.id, kind=kind,
                      ref=ref, html=html, expires_at=now + TTL, created_at=now)
    db.add(frame)
    db.flush()
    return frame


def path(frame: MailFrame) -> str:
    return PATH_PREFIX + TOKENS.token(frame.id)


def html(db: Session, token: str) -> str:
    """The HTML of the frame ``token`` names; NotFound when the token is not ours or the
    frame expired (and was or will be deleted)."""
    frame_id = TOKENS.verify(token)
    found = None
    if frame_id is not None:
        with tenancy.across_tenants(db, "mail-frame"):  # the signature named the row
            found = db.scalar(select(MailFrame.html).where(
                MailFrame.id == frame_id, MailFrame.expires_at >= clock.now()))
    if found is None:
        raise errors.NotFound("this preview has expired or its address is not valid: "
                              "show it again from the console")
    return found
