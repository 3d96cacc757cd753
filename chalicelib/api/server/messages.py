"""Messaging surface: send (one or a batch) and read messages, attempts, raw source, and their
content as the recipient reads it (headers, text, HTML, attachments)."""
from __future__ import annotations

from chalice import Blueprint
from pydantic import ValidationError as PydanticValidationError

from chalicelib import errors, response_shapes, statuses
from chalicelib.api.response_builders import messaging
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate, validation_error_from
from chalicelib.api.request_bodies.messages import BatchRequest, SendRequest
from chalicelib.db.models import Message
from chalicelib.services.messages import actions, search
from chalicelib.services.mime import view
from chalicelib.services.sending import submission
from chalicelib.response_shapes import messaging as shape
from chalicelib.services.failures import CATEGORIES

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


@endpoint(bp, "/messages", "GET", auth=SERVER, query=(
    *q.PAGINATION,
    q.date_time("from", "Only messages created at or after this time"),
    q.date_time("to", "Only messages created before this time"),
    q.string("scope", "outgoing or incoming.", enum=messaging.SCOPES),
    q.string("status", "Only messages with this status.", enum=statuses.MESSAGE),
    q.string("tag", "Only messages with this tag."),
    q.string("stream", "Only messages of the stream with this permalink."),
    q.string("query", "Text found in the subject, recipient or sender."),
    q.string("bounce_category", "Only messages whose last failure or bounce has this category.",
             enum=CATEGORIES)),
          response=response_shapes.page("messages", shape.Message))
def list_messages(call: Call):
    page, per_page = call.page_args()
    stmt = search.list_stmt(
        call.db, call.server.id, scope=call.query_str("scope"), status=call.query_str("status"),
        tag=call.query_str("tag"), stream=call.query_str("stream"),
        bounce_category=call.query_str("bounce_category"), query=call.query_str("query"),
        start=call.query_datetime("from"), end=call.query_datetime("to"))
    rows, pagination = paginate(call.db, stmt, page, per_page)
    streams = search.stream_permalinks(call.db, (m.stream_id for m in rows))
    return {"messages": [messaging.message(m, streams.get(m.stream_id)) for m in rows],
            "pagination": pagination}


def find_message(call: Call, message_id: int) -> Message:
    return search.find(call.db, call.server.id, message_id)


def _deliveries(call: Call, message: Message) -> list[dict]:
    return [messaging.delivery(d) for d in search.deliveries(call.db, message)]


@endpoint(bp, "/messages/{id}", "GET", auth=SERVER,
          response=response_shapes.one("message", shape.MessageDetail))
def show_message(call: Call, id: int):
    message = find_message(call, id)
    record = messaging.message(message, search.stream_permalinks(call.db, [message.stream_id])
                             .get(message.stream_id))
    record["events"] = [messaging.event(e) for e in search.history(call.db, message)]
    record["deliveries"] = _deliveries(call, message)
    return {"message": record}


@endpoint(bp, "/messages/{id}/deliveries", "GET", auth=SERVER,
          response=shape.Deliveries)
def list_deliveries(call: Call, id: int):
    return {"deliveries": _deliveries(call, find_message(call, id))}


def _message_answer(call: Call, message: Message) -> dict:
    """{message}: the record after an action, with its stream's permalink."""
    return {"message": messaging.message(
        message, search.stream_permalinks(call.db, [message.stream_id]).get(message.stream_id))}


@endpoint(bp, "/messages/{id}/retry", "POST", auth=SERVER,
          response=response_shapes.one("message", shape.Message))
def retry_message(call: Call, id: int):
    """Requeue a Held or HardFail outgoing message for a fresh delivery."""
    return _message_answer(call, actions.retry(call.db, find_message(call, id)))


@endpoint(bp, "/messages/{id}/cancel", "POST", auth=SERVER,
          response=response_shapes.one("message", shape.Message))
def cancel_message(call: Call, id: int):
    """Cancel a Scheduled or Pending message that has not been attempted yet."""
    return _message_answer(call, actions.cancel(call.db, find_message(call, id)))


@endpoint(bp, "/messages/{id}/raw", "GET", auth=SERVER,
          response=shape.Raw)
def show_raw(call: Call, id: int):
    """The exact bytes sent (signed) once an attempt was made, else the stored source."""
    message = find_message(call, id)
    return messaging.raw(message.id, *search.raw_source(call.db, message))


def attachment_index(index: str) -> int:
    """An attachment's number from the path (anything else names no attachment)."""
    if not index.isdigit() or len(index) > 6:
        raise errors.NotFound(f"no attachment {index!r}")
    return int(index)


@endpoint(bp, "/messages/{id}/content", "GET", auth=SERVER,
          response=shape.MailContentAnswer)
def show_content(call: Call, id: int):
    """The message as its recipient reads it: headers, text, HTML and attachments."""
    message = find_message(call, id)
    return {"message_id": message.id,
            "content": view.content(search.view_source(call.db, message))}


@endpoint(bp, "/messages/{id}/attachments/{index}", "GET", auth=SERVER,
          response=shape.AttachmentAnswer)
def show_attachment(call: Call, id: int, index: str):
    """One attachment of the message (its bytes as base64)."""
    raw = search.view_source(call.db, find_message(call, id))
    return {"attachment": messaging.attachment(*view.attachment(raw, attachment_index(index)))}
