"""Messaging surface: send (one or a batch) and read messages, attempts and raw source."""
from __future__ import annotations

import base64

from chalice import Blueprint
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy import or_, select

from chalicelib import errors, shapes, statuses
from chalicelib.api import message_records as records
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate, validation_error_from
from chalicelib.api.schemas.messages import BatchRequest, SendRequest
from chalicelib.db.models import Delivery, Message, MessageEvent, MessageRaw, Stream, Submission
from chalicelib.services.messages import actions
from chalicelib.services.sending import submission
from chalicelib.shapes import messaging as shape
from chalicelib.services.delivery.categories import CATEGORIES

bp = Blueprint(__name__)


@endpoint(bp, "/messages", "POST", auth=SERVER, body=SendRequest, status=201,
          response=shape.SendResult, idempotent=True)
def send_message(call: Call):
    return submission.submit(call.db, call.server, call.body)


def _parse_entry(entry) -> SendRequest:
    if not isinstance(entry, dict):
        raise errors.ValidationError("each entry must be a SendRequest object", field="body")
    try:
        return SendRequest.model_validate(entry)
    except PydanticValidationError as exc:
        raise validation_error_from(exc) from None


@endpoint(bp, "/messages/batch", "POST", auth=SERVER, body=BatchRequest,
          array_field="messages", response=shape.BatchResult, idempotent=True)
def send_batch(call: Call):
    """Up to 500 SendRequests, as {messages: [...]} or a bare JSON array; one result each."""
    results = submission.submit_batch(call.db, call.server, call.body.messages,
                                      parse=_parse_entry)
    accepted = sum(1 for r in results if r["status"] == "success")
    return {"messages": results, "accepted": accepted, "failed": len(results) - accepted}


def _stream_permalinks(call: Call, stream_ids) -> dict:
    ids = {i for i in stream_ids if i is not None}
    if not ids:
        return {}
    return dict(call.db.execute(select(Stream.id, Stream.permalink).where(Stream.id.in_(ids))).all())


@endpoint(bp, "/messages", "GET", auth=SERVER, query=(
    *q.PAGINATION,
    q.string("scope", "outgoing or incoming.", enum=records.SCOPES),
    q.string("status", "Only messages with this status.", enum=statuses.MESSAGE),
    q.string("tag", "Only messages with this tag."),
    q.string("stream", "Only messages of the stream with this permalink."),
    q.string("query", "Text found in the subject, recipient or sender."),
    q.string("bounce_category", "Only messages whose last failure or bounce has this category.",
             enum=CATEGORIES)),
          response=shapes.page("messages", shape.Message))
def list_messages(call: Call):
    page, per_page = call.page_args()
    stmt = select(Message).where(Message.server_id == call.server.id)
    scope, status = call.query_str("scope"), call.query_str("status")
    if scope:
        stmt = stmt.where(Message.scope == scope)
    if status:
        stmt = stmt.where(Message.status == status)
    tag, stream, needle = call.query_str("tag"), call.query_str("stream"), call.query_str("query")
    if tag:
        stmt = stmt.where(Message.tag == tag)
    if stream:
        stream_id = call.db.scalar(select(Stream.id).where(
            Stream.server_id == call.server.id, Stream.permalink == stream))
        stmt = stmt.where(Message.stream_id == stream_id) if stream_id else stmt.where(False)
    category = call.query_str("bounce_category")
    if category:
        stmt = stmt.where(Message.bounce_category == category)
    if needle:
        stmt = stmt.where(or_(*(column.icontains(needle, autoescape=True) for column in
                                (Message.subject, Message.rcpt_to, Message.mail_from))))
    rows, pagination = paginate(call.db, stmt.order_by(Message.id.desc()), page, per_page)
    streams = _stream_permalinks(call, (m.stream_id for m in rows))
    return {"messages": [records.message(m, streams.get(m.stream_id)) for m in rows],
            "pagination": pagination}


def find_message(call: Call, message_id: int) -> Message:
    message = call.db.get(Message, message_id)
    if message is None or message.server_id != call.server.id:
        raise errors.NotFound(f"no message {message_id} on this server")
    return message


def _deliveries(call: Call, message: Message) -> list[dict]:
    rows = call.db.scalars(select(Delivery).where(Delivery.message_id == message.id)
                           .order_by(Delivery.id))
    return [records.delivery(d) for d in rows]


@endpoint(bp, "/messages/{id}", "GET", auth=SERVER,
          response=shapes.one("message", shape.MessageDetail))
def show_message(call: Call, id: int):
    message = find_message(call, id)
    record = records.message(message, _stream_permalinks(call, [message.stream_id])
                             .get(message.stream_id))
    history = call.db.scalars(select(MessageEvent).where(MessageEvent.message_id == message.id)
                              .order_by(MessageEvent.id))
    record["events"] = [records.event(e) for e in history]
    record["deliveries"] = _deliveries(call, message)
    return {"message": record}


@endpoint(bp, "/messages/{id}/deliveries", "GET", auth=SERVER,
          response=shape.Deliveries)
def list_deliveries(call: Call, id: int):
    return {"deliveries": _deliveries(call, find_message(call, id))}


def _message_answer(call: Call, message: Message) -> dict:
    """{message}: the record after an action, with its stream's permalink."""
    return {"message": records.message(message, _stream_permalinks(call, [message.stream_id])
                                       .get(message.stream_id))}


@endpoint(bp, "/messages/{id}/retry", "POST", auth=SERVER,
          response=shapes.one("message", shape.Message))
def retry_message(call: Call, id: int):
    """Requeue a Held or HardFail outgoing message for a fresh delivery."""
    return _message_answer(call, actions.retry(call.db, find_message(call, id)))


@endpoint(bp, "/messages/{id}/cancel", "POST", auth=SERVER,
          response=shapes.one("message", shape.Message))
def cancel_message(call: Call, id: int):
    """Cancel a Scheduled or Pending message that has not been attempted yet."""
    return _message_answer(call, actions.cancel(call.db, find_message(call, id)))


@endpoint(bp, "/messages/{id}/raw", "GET", auth=SERVER,
          response=shape.Raw)
def show_raw(call: Call, id: int):
    """The exact bytes sent (signed) once an attempt was made, else the stored source."""
    message = find_message(call, id)
    sent = call.db.get(MessageRaw, message.id)
    if sent is not None:
        raw, signed = sent.raw, True
    elif message.submission_id is not None:
        raw = call.db.scalar(select(Submission.raw).where(Submission.id == message.submission_id))
        signed = False
    else:
        raise errors.NotFound(f"message {id} has no stored source")
    return {"message_id": message.id, "signed": signed, "size": len(raw),
            "raw": raw.decode("utf-8", "replace"),
            "raw_base64": base64.b64encode(raw).decode("ascii")}
