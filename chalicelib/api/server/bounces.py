"""Messaging surface: bounces received at return-path addresses, with their parsed report."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.services import bounces

bp = Blueprint(__name__)


@endpoint(bp, "/bounces", "GET", auth=SERVER, query=q.PAGINATION)
def list_bounces(call: Call):
    rows, pagination = paginate(call.db, bounces.list_stmt(call.server.id), *call.page_args())
    return {"bounces": [bounces.record(call.db, b) for b in rows], "pagination": pagination}


@endpoint(bp, "/bounces/{id}", "GET", auth=SERVER)
def show_bounce(call: Call, id: int):
    return {"bounce": bounces.record(call.db, bounces.find(call.db, call.server.id, id))}
