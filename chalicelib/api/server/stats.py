"""Messaging surface: statistics of the authenticated server over a time range."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api.framework import SERVER, Call, endpoint
from chalicelib.services import stats

bp = Blueprint(__name__)


@endpoint(bp, "/stats", "GET", auth=SERVER)
def show_stats(call: Call):
    return {"stats": stats.summary(call.db, call.server.id, call.query_datetime("from"),
                                   call.query_datetime("to"))}


@endpoint(bp, "/stats/deliveries", "GET", auth=SERVER)
def delivery_stats(call: Call):
    interval = call.query.get("interval") or None
    return {"stats": stats.deliveries(call.db, call.server.id, call.query_datetime("from"),
                                      call.query_datetime("to"), interval)}
