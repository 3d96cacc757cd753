"""Finding a server's messages: the filtered list (newest first), one message with its
history and attempts, its raw source, and the source it is shown from."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db.models import Delivery, Message, MessageEvent, Stream
from chalicelib.services import content


def list_stmt(db: Session, server_id: int, *, scope: str | None = None,
              status: str | None = None, tag: str | None = None, stream: str | None = None,
              bounce_category: str | None = None, query: str | None = None,
              start: datetime | None = None, end: datetime | None = None):
    """The server's messages matching every filter given; ``stream`` is a permalink (an
    unknown one matches nothing), ``query`` text in the subject, recipient or sender,
    ``start``/``end`` the creation time (from ``start`` included, until ``end`` excluded,
    as the statistics count)."""
    if start is not None and end is not None and end <= start:
        raise errors.ValidationError("to: must be later than from", field="to")
    stmt = select(Message).where(Message.server_id == server_id)
    if start is not None:
        stmt = stmt.where(Message.created_at >= start)
    if end is not None:
        stmt = stmt.where(Message.created_at < end)
    if scope:
        stmt = stmt.where(Message.scope == scope)
    if status:
        stmt = stmt.where(Message.status == status)
    if tag:
        stmt = stmt.where(Message.tag == tag)
    if stream:
        stream_id = db.scalar(select(Stream.id).where(Stream.server_id == server_id,
                                                      Stream.permalink == stream))
        stmt = stmt.where(Message.stream_id == stream_id) if stream_id else stmt.where(False)
    if bounce_category:
        stmt = stmt.where(Message.bounce_category == bounce_category)
    if query:
        stmt = stmt.where(text_found(query))
    return stmt.order_by(Message.id.desc())


def text_found(query: str):
    """The condition ``query`` is in a message's subject, recipient or sender (any case)."""
    return or_(*(column.icontains(query, autoescape=True)
                 for column in (Message.subject, Message.rcpt_to, Message.mail_from)))


def stream_permalinks(db: Session, stream_ids) -> dict[int, str]:
    """Stream id -> permalink, for the streams of the messages about to be shown."""
    ids = {i for i in stream_ids if i is not None}
    if not ids:
        return {}
    return dict(db.execute(select(Stream.id, Stream.permalink).where(Stream.id.in_(ids))).all())


def find(db: Session, server_id: int, message_id: int) -> Message:
    message = db.get(Message, message_id)
    if message is None or message.server_id != server_id:
        raise errors.NotFound(f"no message {message_id} on this server")
    return message


def deliveries(db: Session, message: Message) -> list[Delivery]:
    """The message's delivery attempts, oldest first."""
    return list(db.scalars(select(Delivery).where(Delivery.message_id == message.id)
                           .order_by(Delivery.id)))


def history(db: Session, message: Message) -> list[MessageEvent]:
    """The message's events, oldest first."""
    return list(db.scalars(select(MessageEvent).where(MessageEvent.message_id == message.id)
                           .order_by(MessageEvent.id)))


def _kept(message: Message) -> None:
    if content.is_expired(message):
        raise errors.ContentExpired(
            f"the content of message {message.id} has expired (its server's content "
            "retention or a data removal erased it); its record and history are kept")


def raw_source(db: Session, message: Message) -> tuple[bytes, bool]:
    """(bytes, signed): the exact bytes sent once an attempt was made, else the stored
    source. ContentExpired once its content was erased (the record stays)."""
    _kept(message)
    has_sent, data = content.sent_bytes(db, message.id)
    signed = has_sent
    if not has_sent and message.submission_id is not None:
        data = content.source_bytes(db, message.submission_id)
    elif not has_sent:
        raise errors.NotFound(f"message {message.id} has no stored source")
    if data is None:
        raise errors.ContentExpired(f"message {message.id}: its content expired")
    return data, signed


def view_source(db: Session, message: Message) -> bytes:
    """The bytes to show a message from as its recipient reads it: the source as submitted
    (the same parts the recipient gets, without the service's open pixel and rewritten
    links, so looking at it in the console neither counts an open nor follows a click);
    the stored bytes when there is no submission (mail that arrived)."""
    _kept(message)
    if message.submission_id is not None:
        raw = content.source_bytes(db, message.submission_id)
        if raw is not None:
            return raw
    return raw_source(db, message)[0]
