"""Messaging surface: the authenticated server itself."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api.framework import SERVER, Call, endpoint
from chalicelib.api.response_builders import management, messaging
from chalicelib.services.reputation import guard
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


@endpoint(bp, "", "GET", auth=SERVER,
          response=response_shapes.one("server", shape.ServerInfo))
def show_server(call: Call):
    """The authenticated server, with its send limits and this hour's and day's use, and
    its reputation guard's state."""
    return {"server": {**messaging.server_info(call.server, call.principal.credential),
                       "send_limits": management.send_limits_usage(call.server),
                       "reputation": guard.brief(call.db, call.server)}}


@endpoint(bp, "/ping", "GET", auth=SERVER,
          response=shape.Ping)
def ping(call: Call):
    return {"pong": True, "server": messaging.server_info(call.server, call.principal.credential)}
