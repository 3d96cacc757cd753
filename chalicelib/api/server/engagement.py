"""Messaging surface: a message's open and click events (newest first, paginated)."""
from __future__ import annotations

from chalice import Blueprint
from sqlalchemy import select

from chalicelib import errors
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.api.response_builders import messaging
from chalicelib.db.models import ClickEvent, Message, OpenEvent
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


def _message(call: Call, message_id: int) -> Message:
    message = call.db.scalar(select(Message).where(Message.id == message_id,
                                                   Message.server_id == call.server.id))
    if message is None:  # another server's message is as unknown as a missing one
        raise errors.NotFound(f"no message with id {message_id}")
    return message


@endpoint(bp, "/messages/{id}/opens", "GET", auth=SERVER, query=q.PAGINATION,
          response=shape.Opens)
def list_opens(call: Call, id: int):
    message = _message(call, id)
    stmt = (select(OpenEvent).where(OpenEvent.message_id == message.id)
            .order_by(OpenEvent.created_at.desc(), OpenEvent.id.desc()))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"message_id": message.id, "opens_count": message.opens_count,
            "opens": [messaging.open_event(e) for e in rows], "pagination": pagination}


@endpoint(bp, "/messages/{id}/clicks", "GET", auth=SERVER, query=q.PAGINATION,
          response=shape.Clicks)
def list_clicks(call: Call, id: int):
    message = _message(call, id)
    stmt = (select(ClickEvent).where(ClickEvent.message_id == message.id)
            .order_by(ClickEvent.created_at.desc(), ClickEvent.id.desc()))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"message_id": message.id, "clicks_count": message.clicks_count,
            "clicks": [messaging.click_event(e) for e in rows], "pagination": pagination}
