"""Messaging surface: the server's message streams."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, Call, endpoint, paginate
from chalicelib.api.request_bodies.streams import StreamIn, StreamUpdate
from chalicelib.api.response_builders import messaging
from chalicelib.services.sending import streams
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


INCLUDE_ARCHIVED = q.boolean("include_archived", "Include archived ones")


@endpoint(bp, "/streams", "GET", auth=SERVER, query=(
    *q.PAGINATION, INCLUDE_ARCHIVED,
    q.string("stream_type", "Only streams of this type.", enum=streams.STREAM_TYPES)),
          response=response_shapes.page("streams", shape.Stream))
def list_streams(call: Call):
    """List the server's streams (archived ones with include_archived=true; filter stream_type)."""
    stmt = streams.list_query(call.server, include_archived=call.query_bool("include_archived"),
                              stream_type=call.query_str("stream_type"))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"streams": [messaging.stream(s) for s in rows], "pagination": pagination}


@endpoint(bp, "/streams", "POST", auth=SERVER, body=StreamIn, status=201,
          response=response_shapes.one("stream", shape.Stream))
def create_stream(call: Call):
    """Create a stream (transactional or broadcast); permalink generated from the name."""
    body = call.body
    stream = streams.create(call.db, call.server, name=body.name, stream_type=body.stream_type,
                            permalink=body.permalink, description=body.description,
                            list_unsubscribe=body.list_unsubscribe)
    return {"stream": messaging.stream(stream)}


@endpoint(bp, "/streams/{permalink}", "GET", auth=SERVER,
          response=response_shapes.one("stream", shape.Stream))
def show_stream(call: Call, permalink: str):
    """Show a stream, archived or not."""
    return {"stream": messaging.stream(streams.find(call.db, call.server, permalink))}


@endpoint(bp, "/streams/{permalink}", "PATCH", auth=SERVER, body=StreamUpdate,
          response=response_shapes.one("stream", shape.Stream))
def update_stream(call: Call, permalink: str):
    """Update a stream's name and description; stream_type is fixed at creation."""
    stream = streams.find(call.db, call.server, permalink)
    streams.update(stream, call.body.model_dump(exclude_unset=True))
    call.db.flush()
    return {"stream": messaging.stream(stream)}


@endpoint(bp, "/streams/{permalink}/archive", "POST", auth=SERVER,
          response=response_shapes.one("stream", shape.Stream))
def archive_stream(call: Call, permalink: str):
    """Archive a stream: sends naming it answer 422; the default stream cannot be archived."""
    stream = streams.archive(streams.find(call.db, call.server, permalink))
    call.db.flush()
    return {"stream": messaging.stream(stream)}


@endpoint(bp, "/streams/{permalink}/unarchive", "POST", auth=SERVER,
          response=response_shapes.one("stream", shape.Stream))
def unarchive_stream(call: Call, permalink: str):
    """Bring an archived stream back (ours, as Postmark has it): sends may name it again."""
    stream = streams.unarchive(streams.find(call.db, call.server, permalink))
    call.db.flush()
    return {"stream": messaging.stream(stream)}
