"""Messaging surface (ours): the server's captured-mail inbox (services/messages/captured.py):
the outgoing mail kept instead of sent with DELIVERY_RELAY=capture or in Development mode.
Read with messages.read, cleared with messages.manage, as messages are."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.api.response_builders import messaging
from chalicelib.api.server.messages import attachment_index
from chalicelib.services.delivery.capture import REASONS
from chalicelib.services.messages import captured, search
from chalicelib.services.mime import view
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


@endpoint(bp, "/captured", "GET", auth=SERVER, query=(
    *q.PAGINATION,
    q.string("query", "Text found in the subject, recipient or sender."),
    q.string("reason", "Only entries kept for this reason.", enum=REASONS)),
          response=response_shapes.page("captured", shape.CapturedMessage))
def list_captured(call: Call):
    """The captured-mail inbox, newest first."""
    stmt = captured.list_stmt(call.server.id, query=call.query_str("query"),
                              reason=call.query_str("reason"))
    entries, pagination = paginate(call.db, stmt, *call.page_args())
    return {"captured": [messaging.captured(entry, message)
                         for entry, message in captured.with_messages(call.db, entries)],
            "pagination": pagination}


@endpoint(bp, "/captured", "DELETE", auth=SERVER, response=shape.CapturedCleared)
def clear_captured(call: Call):
    """Empty the inbox (the messages themselves and their history stay)."""
    return {"cleared": captured.clear(call.db, call.server.id)}


@endpoint(bp, "/captured/{id}", "GET", auth=SERVER, response=shape.CapturedDetail)
def show_captured(call: Call, id: int):  # noqa: A002  (the path parameter's name)
    """One captured message: its entry and its content (headers, text, HTML, attachments)."""
    entry, message = captured.find(call.db, call.server.id, id)
    return {"captured": messaging.captured(entry, message),
            "content": view.content(search.view_source(call.db, message))}


@endpoint(bp, "/captured/{id}", "DELETE", auth=SERVER,
          response=response_shapes.deleted("captured", shape.CapturedMessage))
def delete_captured(call: Call, id: int):  # noqa: A002
    """Remove one entry from the inbox (the message stays)."""
    entry, message = captured.remove(call.db, call.server.id, id)
    return {"captured": messaging.captured(entry, message), "deleted": True}


@endpoint(bp, "/captured/{id}/raw", "GET", auth=SERVER, response=shape.Raw)
def show_captured_raw(call: Call, id: int):  # noqa: A002
    """The captured bytes: exactly what would have gone out (signed), or for Development
    mode the source as submitted."""
    _, message = captured.find(call.db, call.server.id, id)
    return messaging.raw(message.id, *search.raw_source(call.db, message))


@endpoint(bp, "/captured/{id}/attachments/{index}", "GET", auth=SERVER,
          response=shape.AttachmentAnswer)
def show_captured_attachment(call: Call, id: int, index: str):  # noqa: A002
    """One attachment of a captured message (its bytes as base64)."""
    _, message = captured.find(call.db, call.server.id, id)
    raw = search.view_source(call.db, message)
    return {"attachment": messaging.attachment(*view.attachment(raw, attachment_index(index)))}
