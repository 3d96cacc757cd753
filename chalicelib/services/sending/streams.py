"""Message streams: a server's traffic classes (transactional or broadcast).

Every server is created with a default transactional stream ``outbound``
(services/organizations/organizations.py). A send names a stream by permalink; the submission service
resolves it (absent: the default stream; unknown or archived: ValidationError on ``stream``).
``stream_type`` is fixed at creation: moving a stream between classes would mix the traffic
already counted under one class into the other in stats.

``list_unsubscribe``: broadcast streams always carry List-Unsubscribe (RFC 8058; the large
mailbox providers require it of bulk mail), so it cannot be turned off there; a transactional
stream carries it only when the tenant turns it on (services/suppressions/unsubscribe.py).
"""
from __future__ import annotations

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.db.models import Server, Stream
from chalicelib.services.organizations.organizations import save_with_permalink

STREAM_TYPES = ("transactional", "broadcast")


def _taken(db: Session, server: Server, permalink: str) -> bool:
    return bool(db.scalar(select(exists().where(Stream.server_id == server.id,
                                                Stream.permalink == permalink))))


def list_query(server: Server, *, include_archived: bool = False, stream_type: str | None = None):
    stmt = select(Stream).where(Stream.server_id == server.id)
    if not include_archived:
        stmt = stmt.where(Stream.archived_at.is_(None))
    if stream_type is not None:
        if stream_type not in STREAM_TYPES:
            raise errors.ValidationError(
                f"stream_type: must be one of {', '.join(STREAM_TYPES)}", field="stream_type")
        stmt = stmt.where(Stream.stream_type == stream_type)
    return stmt.order_by(Stream.is_default.desc(), Stream.id)


def find(db: Session, server: Server, permalink: str) -> Stream:
    """The stream, archived or not; NotFound when the server has none by that permalink."""
    stream = db.scalar(select(Stream).where(Stream.server_id == server.id,
                                            Stream.permalink == permalink))
    if stream is None:
        raise errors.NotFound(f"no stream {permalink!r}")
    return stream


def _list_unsubscribe(stream_type: str, value: bool | None, current: bool = False) -> bool:
    if stream_type == "broadcast":
        if value is False:
            raise errors.ValidationError(
                "list_unsubscribe: broadcast streams always carry List-Unsubscribe "
                "(one-click unsubscribe is required of bulk mail)", field="list_unsubscribe")
        return True
    return current if value is None else value


def create(db: Session, server: Server, *, name: str, stream_type: str = "transactional",
           permalink: str | None = None, description: str | None = None,
           list_unsubscribe: bool | None = None) -> Stream:
    if stream_type not in STREAM_TYPES:
        raise errors.ValidationError(f"stream_type: must be one of {', '.join(STREAM_TYPES)}",
                                     field="stream_type")
    stream = Stream(server_id=server.id, name=name, stream_type=stream_type,
                    list_unsubscribe=_list_unsubscribe(stream_type, list_unsubscribe),
                    description=description, is_default=False)
    save_with_permalink(db, stream, permalink, name, lambda p: _taken(db, server, p))
    return stream


def update(stream: Stream, changes: dict) -> Stream:
    """Apply ``name`` and ``description``; ``stream_type`` may be repeated unchanged but not
    changed."""
    if "stream_type" in changes and changes["stream_type"] is not None \
            and changes["stream_type"] != stream.stream_type:
        raise errors.ValidationError(
            "stream_type: cannot be changed after the stream is created; create a new stream",
            field="stream_type")
    if changes.get("name") is not None:
        stream.name = changes["name"]
    if "description" in changes:
        stream.description = changes["description"]
    if "list_unsubscribe" in changes:
        stream.list_unsubscribe = _list_unsubscribe(stream.stream_type,
                                                    changes["list_unsubscribe"],
                                                    stream.list_unsubscribe)
    return stream


def archive(stream: Stream) -> Stream:
    """Archive a stream: sends naming it are refused from now on; its messages stay. The
    default stream cannot be archived (sends without a stream go there). Idempotent."""
    if stream.is_default:
        raise errors.ValidationError("the default stream cannot be archived",
                                     field="permalink")
    if stream.archived_at is None:
        stream.archived_at = clock.now()
    return stream


def unarchive(stream: Stream) -> Stream:
    """Bring an archived stream back: sends may name it again. Idempotent."""
    stream.archived_at = None
    return stream


