"""Mail: streams, templates, submissions (raw source stored once), per-recipient messages,
delivery attempts, the event history, and the suppression list.

A Message row is the truth for its pending work: ``status`` and ``next_attempt_at`` say what
is due; ``locked_by``/``locked_at`` is a worker's claim (see db/claims.py).
"""
# No `from __future__ import annotations` (cold start): see chalicelib/db/base.py.

from datetime import datetime
from typing import Any

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, ForeignKey, Index, Integer, LargeBinary, String,
                        Text, UniqueConstraint)
from sqlalchemy.orm import Mapped, deferred, mapped_column, relationship

from chalicelib import clock, statuses
from chalicelib.db.base import Base, BigId, Timestamps


class Stream(Timestamps, Base):
    __tablename__ = "streams"
    __table_args__ = (UniqueConstraint("server_id", "permalink"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    permalink: Mapped[str] = mapped_column(String(64), nullable=False)
    stream_type: Mapped[str] = mapped_column(String(16), default="transactional", nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    # Transactional streams carry List-Unsubscribe only when this is on; broadcast streams
    # always do (services/suppressions/unsubscribe.py).
    list_unsubscribe: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0",
                                                   nullable=False)
    is_default: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    archived_at: Mapped[datetime | None] = mapped_column(DateTime())


class Template(Timestamps, Base):
    __tablename__ = "templates"
    __table_args__ = (UniqueConstraint("server_id", "permalink"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    permalink: Mapped[str] = mapped_column(String(64), nullable=False)
    subject: Mapped[str | None] = mapped_column(Text)
    html_body: Mapped[str | None] = mapped_column(Text)
    text_body: Mapped[str | None] = mapped_column(Text)
    archived_at: Mapped[datetime | None] = mapped_column(DateTime())


class Submission(Base):
    """One accepted submission (HTTP send or SMTP DATA): the raw RFC 5322 source, stored once
    and shared by the per-recipient messages. Its id is SendResult.message_id."""

    __tablename__ = "submissions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    message_id_header: Mapped[str | None] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(Integer, nullable=False)
    # Where the bytes are (services/content/): the store's key, "" while they are still in
    # ``raw`` (rows written before 0021, until the backfill moves them), "expired" once erased.
    content_key: Mapped[str] = mapped_column(String(80), default="", server_default="",
                                             nullable=False, index=True)
    content_sha256: Mapped[str] = mapped_column(String(64), default="", server_default="",
                                                nullable=False)
    # The bytes of rows written before the content store; a later release drops it.
    raw: Mapped[bytes | None] = deferred(mapped_column(LargeBinary, nullable=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


# A new column of Message (or Submission) needs a ``server_default`` as well as any ``default``:
# on PostgreSQL, services/sending/store.py writes these rows with INSERT ... SELECT over the
# keys of the row dicts it builds, so a Python ``default`` never applies to a column the dict
# does not name (docs/architecture.md, "A field of the send request"). The column of a send
# request field kept as given (response_shapes/messaging.py KeptSendFields) is always named
# there: nullable, it needs no default.
class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_server_created", "server_id", "created_at"),
        Index("ix_messages_server_status", "server_id", "status"),
        Index("ix_messages_server_tag", "server_id", "tag"),
        Index("ix_messages_due", "status", "next_attempt_at"),
        # Stats count bounce categories from the rows: ``bounce_category IS NOT NULL`` is a
        # range of this index (the failed messages only). Not a partial index: its dialect
        # arguments would import both dialect modules at cold start.
        Index("ix_messages_server_category", "server_id", "bounce_category", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), nullable=False
    )
    submission_id: Mapped[int | None] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True
    )
    token: Mapped[str] = mapped_column(String(32), unique=True, nullable=False)
    scope: Mapped[str] = mapped_column(String(16), default="outgoing", nullable=False)
    bounce: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    rcpt_to: Mapped[str] = mapped_column(String(255), nullable=False)
    mail_from: Mapped[str] = mapped_column(String(255), nullable=False)
    subject: Mapped[str | None] = mapped_column(String(998))
    message_id_header: Mapped[str | None] = mapped_column(String(255))
    tag: Mapped[str | None] = mapped_column(String(255))
    metadata_json: Mapped[Any | None] = mapped_column("metadata", JSON)
    stream_id: Mapped[int | None] = mapped_column(ForeignKey("streams.id", ondelete="SET NULL"))
    domain_id: Mapped[int | None] = mapped_column(ForeignKey("domains.id", ondelete="SET NULL"))
    route_id: Mapped[int | None] = mapped_column(ForeignKey("routes.id", ondelete="SET NULL"))
    original_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), index=True
    )  # for bounces: the outgoing message this DSN is about
    size: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    # Pending, Scheduled, Sent, SoftFail, HardFail, Held, Bounced, Cancelled (outgoing);
    # Pending, Held, Delivered,
    # Failed, Rejected (incoming)
    status: Mapped[str] = mapped_column(String(16), default=statuses.PENDING, nullable=False)
    status_details: Mapped[str | None] = mapped_column(Text)
    # The category and reason of the last failed attempt or bounce (services/failures/), kept
    # after a later success (they say why the message was late); NULL: it never failed.
    bounce_category: Mapped[str | None] = mapped_column(String(32))
    bounce_reason: Mapped[str | None] = mapped_column(String(32))
    held: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    # The host of the envelope sender it went out with (its last attempt's): a domain's own
    # return path (rp.example.com) or RETURN_PATH_DOMAIN; NULL until an attempt reached a
    # server. Bounces to it are accepted after the domain changes its return path.
    return_path: Mapped[str | None] = mapped_column(String(255))
    track_opens: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    track_clicks: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime())
    locked_by: Mapped[str | None] = mapped_column(String(64))
    locked_at: Mapped[datetime | None] = mapped_column(DateTime())
    # When the sweeper last sent this row a wake-up (cleared by a claim): it sends no other
    # while that one may still be queued (services/claims.due_ids).
    woken_at: Mapped[datetime | None] = mapped_column(DateTime())
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime())
    sent_at: Mapped[datetime | None] = mapped_column(DateTime())
    # When its content (raw source, signed copy) was erased: by content retention or a data
    # removal (services/content). NULL while it is kept; reads then answer ContentExpired.
    content_expired_at: Mapped[datetime | None] = mapped_column(DateTime())
    opens_count: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    clicks_count: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(), default=clock.now, onupdate=clock.now, nullable=False
    )

    submission: Mapped[Submission | None] = relationship()
    stream: Mapped[Stream | None] = relationship()


class MessageRaw(Base):
    """The exact bytes sent on the wire for one message (after tracking and DKIM): named by
    ``content_key`` in the content store (services/content/, as Submission's)."""

    __tablename__ = "message_raws"

    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True
    )
    content_key: Mapped[str] = mapped_column(String(80), default="", server_default="",
                                             nullable=False, index=True)
    content_sha256: Mapped[str] = mapped_column(String(64), default="", server_default="",
                                                nullable=False)
    size: Mapped[int] = mapped_column(Integer, default=0, server_default="0", nullable=False)
    # The bytes of rows written before the content store; a later release drops it.
    raw: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class Delivery(Base):
    """One delivery attempt of a message and its outcome."""

    __tablename__ = "deliveries"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True, nullable=False
    )
    status: Mapped[str] = mapped_column(String(16), nullable=False)  # InFlight, Sent, SoftFail, HardFail
    stage: Mapped[str | None] = mapped_column(String(16))  # connect, envelope, data, done
    host: Mapped[str | None] = mapped_column(String(255))
    code: Mapped[int | None] = mapped_column(Integer)
    output: Mapped[str | None] = mapped_column(Text)
    details: Mapped[str | None] = mapped_column(Text)
    category: Mapped[str | None] = mapped_column(String(32))  # of a failed attempt
    reason: Mapped[str | None] = mapped_column(String(32))  # of a failed attempt (failures/)
    tls: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    # the server's certificate was validated for the host's name (MTA-STS: smtp.py)
    tls_verified: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False,
                                               server_default="0")
    mta_sts: Mapped[str | None] = mapped_column(String(8))  # the policy's mode that applied
    source_address: Mapped[str | None] = mapped_column(String(39))  # the IP pool's, bound
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class MessageEvent(Base):
    """History of a message: every event of the spec's table (MessageSent...) as it happened."""

    __tablename__ = "message_events"
    # the partial-hour edges of GET /stats/deliveries read a short range of this index
    __table_args__ = (Index("ix_message_events_server_created", "server_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True, nullable=False
    )
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    event: Mapped[str] = mapped_column(String(32), nullable=False)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    details: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)


class Suppression(Base):
    """One suppression of an address on a server: for every stream (``stream_id`` NULL,
    ``stream_key`` 0) or for one stream (``stream_key`` = ``stream_id``). ``stream_key`` exists
    so that the unique key (server, address, stream) works with "every stream" on both
    databases (NULLs are never equal in a unique constraint) and upserts can name it."""

    __tablename__ = "suppressions"
    __table_args__ = (UniqueConstraint("server_id", "address", "stream_key",
                                       name="uq_suppressions_server_address_stream"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    address: Mapped[str] = mapped_column(String(255), nullable=False)
    # HardBounce, SpamComplaint, Unsubscribe, Manual (services/suppressions.REASONS)
    reason: Mapped[str] = mapped_column("reason_code", String(16), default="Manual",
                                        server_default="Manual", nullable=False)
    # Free text: what happened (the column was the reason before reasons became a list)
    details: Mapped[str | None] = mapped_column("reason", Text)
    # Who or what added it (services/suppressions.ORIGINS)
    origin: Mapped[str] = mapped_column("source", String(16), default="manual", nullable=False)
    stream_id: Mapped[int | None] = mapped_column(ForeignKey("streams.id", ondelete="CASCADE"))
    stream_key: Mapped[int] = mapped_column(Integer, default=0, server_default="0",
                                            nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime())
    # A bounce's entry: the failure's reason (services/failures/) and the message whose
    # failure or bounce added it (not a foreign key: the message may be deleted by retention)
    bounce_reason: Mapped[str | None] = mapped_column(String(32))
    message_id: Mapped[int | None] = mapped_column(BigInteger)

    stream: Mapped[Stream | None] = relationship()


class RecipientFailure(Base):
    """Failures of one address on a server that suppress only when repeated (a mailbox full,
    disabled, a relay's expiry): how many, since when, the last reason
    (services/suppressions/policy.py). Gone once the address is suppressed."""

    __tablename__ = "recipient_failures"
    __table_args__ = (UniqueConstraint("server_id", "address",
                                       name="uq_recipient_failures_server_address"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), index=True, nullable=False
    )
    address: Mapped[str] = mapped_column(String(255), nullable=False)
    reason: Mapped[str] = mapped_column(String(32), nullable=False)
    failures: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    first_failed_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    last_failed_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)


class CapturedMessage(Base):
    """One entry of a server's captured-mail inbox: an outgoing message kept instead of sent,
    by ``DELIVERY_RELAY=capture`` (``reason`` capture: its signed bytes are the message's
    MessageRaw) or because the server is in Development mode (``reason`` development: the
    submitted source). The bytes stay with the message; clearing the inbox deletes these rows
    only, never the messages and their history."""

    __tablename__ = "captured_messages"
    __table_args__ = (Index("ix_captured_messages_server", "server_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    server_id: Mapped[int] = mapped_column(
        ForeignKey("servers.id", ondelete="CASCADE"), nullable=False
    )
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True, nullable=False
    )
    reason: Mapped[str] = mapped_column(String(16), nullable=False)  # capture, development
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
