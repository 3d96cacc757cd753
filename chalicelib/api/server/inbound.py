"""Messaging surface: inbound messages (including held ones): search, show, retry, bypass."""
from __future__ import annotations

from chalice import Blueprint
from sqlalchemy import select

from chalicelib import shapes, statuses
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.db.models import Delivery, Message, Route
from chalicelib.services.inbound import forward, receive
from chalicelib.shapes import messaging as shape
from chalicelib.shapes import builds

bp = Blueprint(__name__)


@builds(shape.InboundMessage)
def record(call: Call, message: Message, detail: bool = False) -> dict:
    route = call.db.get(Route, message.route_id) if message.route_id else None
    data = {"id": message.id, "token": message.token, "scope": message.scope,
            "bounce": message.bounce, "rcpt_to": message.rcpt_to,
            "mail_from": message.mail_from, "subject": message.subject,
            "message_id": message.message_id_header, "size": message.size,
            "status": message.status, "status_details": message.status_details,
            "held": message.held, "attempts": message.attempts,
            "next_attempt_at": message.next_attempt_at,
            "last_attempt_at": message.last_attempt_at,
            "route": None if route is None else {"id": route.id, "name": route.name,
                                                 "mode": route.mode},
            "created_at": message.created_at}
    if detail:
        attempts = call.db.scalars(select(Delivery).where(Delivery.message_id == message.id)
                                   .order_by(Delivery.id))
        data["deliveries"] = [{"id": d.id, "status": d.status, "target": d.host, "code": d.code,
                               "output": d.output, "details": d.details,
                               "duration_ms": d.duration_ms, "created_at": d.created_at}
                              for d in attempts]
    return data


@endpoint(bp, "/inbound", "GET", auth=SERVER, query=(
    *q.PAGINATION,
    q.string("query", "Text found in the subject, recipient or sender."),
    q.string("status", "Only messages with this status.", enum=statuses.INBOUND),
    q.boolean("held", "Only held messages (true) or only messages not held (false)")),
          response=shapes.page("messages", shape.InboundMessage))
def search_inbound(call: Call):
    status = call.query_str("status")
    held = call.query_bool("held") if call.query_str("held") is not None else None
    stmt = receive.search_stmt(call.server.id, query=call.query_str("query"), status=status,
                               held=held)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"messages": [record(call, m) for m in rows], "pagination": pagination}


@endpoint(bp, "/inbound/{id}", "GET", auth=SERVER,
          response=shapes.one("message", shape.InboundMessage))
def show_inbound(call: Call, id: int):
    return {"message": record(call, receive.find(call.db, call.server.id, id), detail=True)}


@endpoint(bp, "/inbound/{id}/retry", "POST", auth=SERVER,
          response=shapes.one("message", shape.InboundMessage))
def retry_inbound(call: Call, id: int):
    message = forward.retry(call.db, receive.find(call.db, call.server.id, id))
    return {"message": record(call, message)}


@endpoint(bp, "/inbound/{id}/bypass", "POST", auth=SERVER,
          response=shapes.one("message", shape.InboundMessage))
def bypass_inbound(call: Call, id: int):
    message = forward.bypass(call.db, receive.find(call.db, call.server.id, id))
    return {"message": record(call, message)}
