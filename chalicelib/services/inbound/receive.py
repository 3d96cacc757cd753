"""Incoming mail: storing what the gateway accepted for a route (its handover to the route's
endpoint is ``forward.py``), and finding it.

One Submission row holds the raw source once per server; each recipient gets a Message with
scope ``incoming`` whose status says what is due: ``Queued`` (to deliver, ``next_attempt_at``
set), ``Retrying`` (an attempt failed, another is scheduled), ``Delivered``, ``Failed``
(permanent refusal, or attempts ran out), ``Held`` (waiting for a bypass), ``Accepted``
(stored, no endpoint) and ``Bounced`` (route mode bounce). Every attempt is a Delivery row,
so failures are visible on the message.
"""
from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors, queues, statuses
from chalicelib.db.models import Message
from chalicelib.services.sending import store as submission_store
from chalicelib.services.inbound.routes import RouteMatch

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

QUEUE = queues.INBOUND
_INITIAL_STATUS = {"endpoint": statuses.QUEUED, "accept": statuses.ACCEPTED,
                   "hold": statuses.HELD, "bounce": statuses.BOUNCED}


def new_token() -> str:
    return secrets.token_hex(8)


@dataclass
class Received:
    """One mail the gateway accepted for routes: its headers read before the transaction."""

    mail_from: str
    matches: list[RouteMatch]
    raw: bytes
    subject: str | None = None
    message_id: str | None = None

    def read_headers(self) -> None:
        """Subject (RFC 2047 decoded) and Message-ID; a broken header must not lose the mail."""
        from chalicelib.services import mime  # loaded at first use, not at cold start

        # Only the header section goes to the parser (it would still split the whole body
        # into lines with headersonly): everything up to the first empty line (RFC 5322 2.1).
        end = self.raw.find(b"\r\n\r\n")
        head = self.raw if end < 0 else self.raw[:end + 4]
        try:
            headers = mime.HeaderBlock(head)  # the email package's reading, two headers made
            subject, message_id = headers.get("Subject"), headers.get("Message-ID")
        except Exception:  # noqa: BLE001
            return
        self.subject = str(subject)[:998] if subject is not None else None
        if message_id is not None:
            self.message_id = str(message_id).strip()[:255] or None


def receive(db: Session, *, mail_from: str, matches: list[RouteMatch], raw: bytes) -> list[int]:
    """Store one received mail for every matched recipient (raw stored once per server)."""
    mail = Received(mail_from, matches, raw)
    mail.read_headers()
    return receive_many(db, [mail])


def receive_many(db: Session, mails: list[Received]) -> list[int]:
    """Store received mails (headers read): per server, one submission row per mail holding its
    raw source and one message row per matched recipient, written together with their
    counters (submission_store: one statement on PostgreSQL). Returns the message ids."""
    now = clock.now()
    by_server: dict[int, tuple[list, list, list]] = {}
    for mail in mails:
        for server_id in dict.fromkeys(m.server_id for m in mail.matches):
            sub_rows, rows, owner = by_server.setdefault(server_id, ([], [], []))
            sub_rows.append(dict(server_id=server_id, message_id_header=mail.message_id,
                                 size=len(mail.raw), raw=mail.raw, created_at=now))
            for match in mail.matches:
                if match.server_id == server_id:
                    owner.append(len(sub_rows) - 1)
                    rows.append(_message_row(mail, match, now))
    ids = []
    for server_id, (sub_rows, rows, owner) in by_server.items():
        _, message_ids = submission_store.store(db, server_id, now, sub_rows, rows, owner)
        ids.extend(message_ids)
        for message_id, row in zip(message_ids, rows):
            if row["status"] == statuses.QUEUED:
                queues.enqueue_after_commit(db, QUEUE, message_id)
    return ids


def _message_row(mail: Received, match: RouteMatch, now) -> dict:
    status = _INITIAL_STATUS[match.mode]
    return dict(server_id=match.server_id, token=new_token(), scope="incoming", bounce=False,
                rcpt_to=match.address[:255], mail_from=(mail.mail_from or "")[:255],
                subject=mail.subject, message_id_header=mail.message_id, size=len(mail.raw),
                route_id=match.route_id, status=status, held=status == statuses.HELD,
                status_details="refused to the sender by the route (mode bounce)"
                if status == statuses.BOUNCED else None,
                next_attempt_at=now if status == statuses.QUEUED else None,
                created_at=now, updated_at=now)


def find(db: Session, server_id: int, message_id: int) -> Message:
    message = db.get(Message, message_id)
    if message is None or message.server_id != server_id or message.scope != "incoming" \
            or message.bounce:
        raise errors.NotFound(f"no inbound message {message_id}")
    return message


def search_stmt(server_id: int, *, query: str | None = None, status: str | None = None,
                held: bool | None = None):
    stmt = select(Message).where(Message.server_id == server_id, Message.scope == "incoming",
                                 Message.bounce.is_(False))
    if status:
        stmt = stmt.where(Message.status == status)
    if held is not None:
        stmt = stmt.where(Message.held.is_(held))
    if query:
        like = f"%{query}%"
        stmt = stmt.where(or_(Message.subject.ilike(like), Message.rcpt_to.ilike(like),
                              Message.mail_from.ilike(like)))
    return stmt.order_by(Message.id.desc())
