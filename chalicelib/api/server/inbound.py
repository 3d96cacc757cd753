"""Messaging surface: inbound messages (including held ones): search, show, retry, bypass."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes, statuses
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.api.response_builders import messaging
from chalicelib.services.inbound import forward, receive
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


@endpoint(bp, "/inbound", "GET", auth=SERVER, query=(
    *q.PAGINATION,
    q.string("query", "Text found in the subject, recipient or sender."),
    q.string("status", "Only messages with this status.", enum=statuses.INBOUND),
    q.boolean("held", "Only held messages (true) or only messages not held (false)")),
          response=response_shapes.page("messages", shape.InboundMessage))
def search_inbound(call: Call):
    status = call.query_str("status")
    held = call.query_bool("held") if call.query_str("held") is not None else None
    stmt = receive.search_stmt(call.server.id, query=call.query_str("query"), status=status,
                               held=held)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"messages": [messaging.inbound_message(call.db, m) for m in rows], "pagination": pagination}


@endpoint(bp, "/inbound/{id}", "GET", auth=SERVER,
          response=response_shapes.one("message", shape.InboundMessage))
def show_inbound(call: Call, id: int):
    return {"message": messaging.inbound_message(call.db, receive.find(call.db, call.server.id, id), detail=True)}


@endpoint(bp, "/inbound/{id}/retry", "POST", auth=SERVER,
          response=response_shapes.one("message", shape.InboundMessage))
def retry_inbound(call: Call, id: int):
    message = forward.retry(call.db, receive.find(call.db, call.server.id, id))
    return {"message": messaging.inbound_message(call.db, message)}


@endpoint(bp, "/inbound/{id}/bypass", "POST", auth=SERVER,
          response=response_shapes.one("message", shape.InboundMessage))
def bypass_inbound(call: Call, id: int):
    message = forward.bypass(call.db, receive.find(call.db, call.server.id, id))
    return {"message": messaging.inbound_message(call.db, message)}
