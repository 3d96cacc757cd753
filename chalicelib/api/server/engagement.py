"""Messaging surface: a message's open and click events (newest first, paginated)."""
from __future__ import annotations

from chalice import Blueprint
from sqlalchemy import select

from chalicelib import errors, shapes
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.db.models import ClickEvent, Message, OpenEvent
from chalicelib.shapes import messaging as shape
from chalicelib.shapes import builds

bp = Blueprint(__name__)


def _message(call: Call, message_id: int) -> Message:
    message = call.db.scalar(select(Message).where(Message.id == message_id,
                                                   Message.server_id == call.server.id))
    if message is None:  # another server's message is as unknown as a missing one
        raise errors.NotFound(f"no message with id {message_id}")
    return message


@builds(shape.Open)
def open_record(event: OpenEvent) -> dict:
    return {"id": event.id, "message_id": event.message_id, "ip_address": event.ip_address,
            "user_agent": event.user_agent, "likely_machine": event.likely_machine,
            "detection": event.detection, "created_at": event.created_at}


@builds(shape.Click)
def click_record(event: ClickEvent) -> dict:
    return {**open_record(event), "url": event.url, "link_id": event.link_id}


@endpoint(bp, "/messages/{id}/opens", "GET", auth=SERVER, query=q.PAGINATION,
          response=shape.Opens)
def list_opens(call: Call, id: int):
    message = _message(call, id)
    stmt = (select(OpenEvent).where(OpenEvent.message_id == message.id)
            .order_by(OpenEvent.created_at.desc(), OpenEvent.id.desc()))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"message_id": message.id, "opens_count": message.opens_count,
            "opens": [open_record(e) for e in rows], "pagination": pagination}


@endpoint(bp, "/messages/{id}/clicks", "GET", auth=SERVER, query=q.PAGINATION,
          response=shape.Clicks)
def list_clicks(call: Call, id: int):
    message = _message(call, id)
    stmt = (select(ClickEvent).where(ClickEvent.message_id == message.id)
            .order_by(ClickEvent.created_at.desc(), ClickEvent.id.desc()))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"message_id": message.id, "clicks_count": message.clicks_count,
            "clicks": [click_record(e) for e in rows], "pagination": pagination}
