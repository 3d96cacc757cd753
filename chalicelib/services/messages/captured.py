"""The captured-mail inbox of a server: the outgoing messages kept instead of sent
(DELIVERY_RELAY=capture, written by the delivery worker with the outcome, services/delivery/
capture.py) and those held because the server is in Development mode (written here at
submission, and by the worker for a server switched to Development later). Each entry points
at its message, whose stored bytes it shows; clearing the inbox deletes entries, never the
messages, their history or statistics."""
from __future__ import annotations

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.db.models import CapturedMessage, Message
from chalicelib.services.delivery.capture import DEVELOPMENT
from chalicelib.services.messages import search


def keep_development(db: Session, server_id: int, message_ids: list[int]) -> None:
    """Inbox entries for messages just held because their server is in Development mode."""
    if message_ids:
        now = clock.now()
        db.execute(insert(CapturedMessage), [
            {"server_id": server_id, "message_id": i, "reason": DEVELOPMENT, "created_at": now}
            for i in message_ids])


def list_stmt(server_id: int, *, query: str | None = None, reason: str | None = None):
    """The server's inbox entries, newest first; ``query``: text in the subject, recipient
    or sender of their message."""
    stmt = (select(CapturedMessage).join(Message, Message.id == CapturedMessage.message_id)
            .where(CapturedMessage.server_id == server_id))
    if reason:
        stmt = stmt.where(CapturedMessage.reason == reason)
    if query:
        stmt = stmt.where(search.text_found(query))
    return stmt.order_by(CapturedMessage.id.desc())


def with_messages(db: Session, entries: list[CapturedMessage]) -> list[tuple[CapturedMessage,
                                                                            Message]]:
    """Each entry with its message (one query for the page)."""
    ids = {e.message_id for e in entries}
    found = {m.id: m for m in db.scalars(select(Message).where(Message.id.in_(ids)))} \
        if ids else {}
    return [(e, found[e.message_id]) for e in entries]


def find(db: Session, server_id: int, captured_id: int) -> tuple[CapturedMessage, Message]:
    entry = db.get(CapturedMessage, captured_id)
    if entry is None or entry.server_id != server_id:
        raise errors.NotFound(f"no captured message {captured_id} on this server")
    return entry, db.get(Message, entry.message_id)


def remove(db: Session, server_id: int, captured_id: int) -> tuple[CapturedMessage, Message]:
    entry, message = find(db, server_id, captured_id)
    db.delete(entry)
    db.flush()
    return entry, message


def clear(db: Session, server_id: int) -> int:
    """Empty the server's inbox; returns how many entries went."""
    return db.execute(delete(CapturedMessage).where(CapturedMessage.server_id == server_id)
                      .execution_options(synchronize_session=False)).rowcount or 0
