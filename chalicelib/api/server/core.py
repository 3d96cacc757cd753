"""Messaging surface: the authenticated server itself."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api.framework import SERVER, Call, endpoint

bp = Blueprint(__name__)


def server_record(call: Call) -> dict:
    srv = call.server
    return {"id": srv.id, "uuid": srv.uuid, "name": srv.name, "permalink": srv.permalink,
            "mode": srv.mode, "suspended": srv.suspended,
            "organization": srv.organization.permalink,
            "credential": {"id": call.principal.credential.id,
                           "name": call.principal.credential.name}}


@endpoint(bp, "", "GET", auth=SERVER)
def show_server(call: Call):
    return {"server": server_record(call)}


@endpoint(bp, "/ping", "GET", auth=SERVER)
def ping(call: Call):
    return {"pong": True, "server": server_record(call)}
