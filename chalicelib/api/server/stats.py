"""Messaging surface: statistics of the authenticated server over a time range."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint
from chalicelib.services.tracking import stats
from chalicelib.response_shapes import stats as shape

bp = Blueprint(__name__)


RANGE = (
    q.date_time("from", "Start of the range"),
    q.date_time("to", "End of the range"),
)


@endpoint(bp, "/stats", "GET", auth=SERVER, query=RANGE,
          response=shape.StatsAnswer)
def show_stats(call: Call):
    return {"stats": stats.summary(call.db, call.server.id, call.query_datetime("from"),
                                   call.query_datetime("to"))}


BUCKETED = (*RANGE, q.string("interval", "Bucket size (default: hour up to two days, day beyond).",
                            enum=stats.INTERVALS))


@endpoint(bp, "/stats/deliveries", "GET", auth=SERVER, query=BUCKETED,
          response=shape.DeliveryStatsAnswer)
def delivery_stats(call: Call):
    interval = call.query_str("interval")
    return {"stats": stats.deliveries(call.db, call.server.id, call.query_datetime("from"),
                                      call.query_datetime("to"), interval)}


@endpoint(bp, "/stats/engagement", "GET", auth=SERVER, query=BUCKETED,
          response=shape.EngagementStatsAnswer)
def engagement_stats(call: Call):
    """Ours (the spec has no shape for it): opens and clicks per bucket, beside deliveries."""
    return {"stats": stats.engagement(call.db, call.server.id, call.query_datetime("from"),
                                      call.query_datetime("to"), call.query_str("interval"))}
