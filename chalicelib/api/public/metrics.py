"""GET /metrics: the local stack's counters and queue lag in the Prometheus text format.

Only with METRICS_BACKEND=prometheus (the local default). The deployed stages write CloudWatch
EMF instead and this answers 404 there: a Lambda container's in-process counters would be a
random slice of the traffic. No credential, like any scrape target on localhost."""
from __future__ import annotations

from chalice import Blueprint, Response

from chalicelib import errors, observability
from chalicelib.api.framework import NONE, Call, endpoint
from chalicelib.config import get_settings

bp = Blueprint(__name__)


@endpoint(bp, "/metrics", "GET", auth=NONE, raw=True)
def metrics(call: Call):
    """Prometheus metrics (local stack only)"""
    if get_settings().metrics_backend != "prometheus":
        raise errors.NotFound("GET /metrics is served only with METRICS_BACKEND=prometheus")
    from chalicelib.workers import sweeper

    return Response(body=observability.prometheus_text(sweeper.queue_lags()), status_code=200,
                    headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
