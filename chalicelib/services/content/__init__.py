"""Message content: the bytes of a message (the raw source a submission stored, the signed
copy a delivery attempt stored), as opposed to its record (status, events, attempts,
statistics). This package owns erasing them and saying whether they are gone.

This is the minimal version over today's storage (``submissions.raw``, ``message_raws``);
the content store (issue 35 item 1) implements the same two names over its port. Callers
(content retention, data removal, the reads that answer ContentExpired) use only these.

A submission's source is shared by its recipients' messages: erasing a message deletes its
own signed copy at once and marks the message; the shared source is emptied only once every
message of its submission is erased, so another recipient's message keeps its content.
"""
from __future__ import annotations

from sqlalchemy import delete, exists, select, update
from sqlalchemy.orm import Session, aliased

from chalicelib import clock
from chalicelib.db.models import Message, MessageRaw, Submission


def erase(db: Session, message_ids: list[int]) -> int:
    """Remove the content of these messages (signed copy; the submission's source once none
    of its messages keeps content) and mark them (``content_expired_at``); the message rows,
    their status, events, attempts and statistics stay. Returns how many messages were newly
    erased (already erased ones are left as they are: idempotent)."""
    ids = sorted(set(message_ids))
    if not ids:
        return 0
    now = clock.now()
    erased = db.execute(update(Message).where(Message.id.in_(ids),
                                              Message.content_expired_at.is_(None))
                        .values(content_expired_at=now)
                        .execution_options(synchronize_session=False)).rowcount
    db.execute(delete(MessageRaw).where(MessageRaw.message_id.in_(ids))
               .execution_options(synchronize_session=False))
    submission_ids = select(Message.submission_id).where(Message.id.in_(ids),
                                                         Message.submission_id.is_not(None))
    other = aliased(Message)
    kept = exists().where(other.submission_id == Submission.id,
                          other.content_expired_at.is_(None))
    db.execute(update(Submission).where(Submission.id.in_(submission_ids), ~kept,
                                        Submission.raw != b"")
               .values(raw=b"").execution_options(synchronize_session=False))
    return erased


def is_expired(row) -> bool:
    """Whether this message's content was erased (a Message, or any row with
    ``content_expired_at``)."""
    return getattr(row, "content_expired_at", None) is not None
