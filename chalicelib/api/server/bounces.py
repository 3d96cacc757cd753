"""Messaging surface: bounces (and complaints) received at return-path addresses, with their
parsed report."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.api.response_builders import messaging
from chalicelib.services.inbound import bounces
from chalicelib.response_shapes import messaging as shape
from chalicelib.services.failures import CATEGORIES

bp = Blueprint(__name__)


@endpoint(bp, "/bounces", "GET", auth=SERVER, query=(
    *q.PAGINATION,
    q.string("category", "Only reports of this category (complaint: spam complaints).",
             enum=CATEGORIES)),
          response=response_shapes.page("bounces", shape.Bounce))
def list_bounces(call: Call):
    stmt = bounces.list_stmt(call.server.id, call.query_str("category"))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"bounces": [messaging.bounce(call.db, b) for b in rows], "pagination": pagination}


@endpoint(bp, "/bounces/{id}", "GET", auth=SERVER,
          response=response_shapes.one("bounce", shape.Bounce))
def show_bounce(call: Call, id: int):
    return {"bounce": messaging.bounce(call.db, bounces.find(call.db, call.server.id, id))}
