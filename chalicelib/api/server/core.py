"""Messaging surface: the authenticated server itself."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import shapes
from chalicelib.api.framework import SERVER, Call, endpoint
from chalicelib.shapes import messaging as shape
from chalicelib.shapes import builds

bp = Blueprint(__name__)


@builds(shape.ServerInfo)
def server_record(call: Call) -> dict:
    srv = call.server
    credential = call.principal.credential  # None for a signed-in user (X-Server)
    return {"id": srv.id, "uuid": srv.uuid, "name": srv.name, "permalink": srv.permalink,
            "mode": srv.mode, "suspended": srv.suspended,
            "organization": srv.organization.permalink,
            "credential": {"id": credential.id, "name": credential.name} if credential else None}


@endpoint(bp, "", "GET", auth=SERVER,
          response=shapes.one("server", shape.ServerInfo))
def show_server(call: Call):
    """The authenticated server, with its send limits and this hour's and day's use."""
    from chalicelib.api.records import send_limits_usage

    return {"server": {**server_record(call), "send_limits": send_limits_usage(call.server)}}


@endpoint(bp, "/ping", "GET", auth=SERVER,
          response=shape.Ping)
def ping(call: Call):
    return {"pong": True, "server": server_record(call)}
