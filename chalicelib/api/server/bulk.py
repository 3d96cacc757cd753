"""Messaging surface: bulk actions on outgoing messages (release, retry, cancel) as
resumable jobs; the work is done by the bulk worker (services/messages/bulk.py)."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api.framework import SERVER, Call, endpoint
from chalicelib.api.request_bodies.messages import BulkRequest
from chalicelib.services.messages import bulk as bulk_actions
from chalicelib import response_shapes
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


@endpoint(bp, "/messages/bulk", "POST", auth=SERVER, body=BulkRequest, status=202,
          response=shape.BulkAnswer)
def create_bulk_job(call: Call):
    """Start a bulk release, retry or cancel (202 with the job), or count it (dry_run)."""
    body = call.body
    if body.dry_run:
        call.status = 200  # nothing was started
    return bulk_actions.create(call.db, call.server, body.action,
                               body.filter.model_dump(exclude_none=True),
                               dry_run=body.dry_run)


@endpoint(bp, "/messages/bulk/{id}", "GET", auth=SERVER,
          response=response_shapes.one("job", shape.BulkJob))
def show_bulk_job(call: Call, id: int):
    """A bulk job's progress: status (Queued, Running, Done), matched, done, failed."""
    return {"job": bulk_actions.record(bulk_actions.find(call.db, call.server, id))}
