"""Management: a server's inbound routes."""
from __future__ import annotations

from typing import Any, Literal

from chalice import Blueprint
from pydantic import Field
from sqlalchemy import select

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies import RouteName, Schema
from chalicelib.api.response_builders import management
from chalicelib.db.models import Route
from chalicelib.services.organizations import lookup
from chalicelib.services.inbound import routes
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
SERVER = "/organizations/{org}/servers/{server}"
Mode = Literal["endpoint", "accept", "hold", "bounce", "reject"]


class RouteIn(Schema):
    name: RouteName
    domain: str = Field(min_length=1, max_length=253)
    mode: Mode = "endpoint"
    endpoint: dict[str, Any] | None = None


class RouteUpdate(Schema):
    name: RouteName | None = None
    mode: Mode | None = None
    endpoint: dict[str, Any] | None = None


@endpoint(bp, SERVER + "/routes", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("routes", shape.Route))
def list_routes(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "routes.read")
    stmt = select(Route).where(Route.server_id == srv.id).order_by(Route.id)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"routes": [management.route(call.db, r) for r in rows], "pagination": pagination}


@endpoint(bp, SERVER + "/routes", "POST", auth=ADMIN, body=RouteIn, status=201,
          response=response_shapes.one("route", shape.Route))
def create_route(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "routes.manage")
    body = call.body
    route = routes.create_route(call.db, srv, name=body.name, domain=body.domain, mode=body.mode,
                                endpoint=body.endpoint)
    return {"route": management.route(call.db, route)}


@endpoint(bp, SERVER + "/routes/{id}", "GET", auth=ADMIN,
          response=response_shapes.one("route", shape.Route))
def show_route(call: Call, org: str, server: str, id: int):
    srv = lookup.server(call.db, call.principal, org, server, "routes.read")
    return {"route": management.route(call.db, routes.find_route(call.db, srv, id))}


@endpoint(bp, SERVER + "/routes/{id}", "PATCH", auth=ADMIN, body=RouteUpdate,
          response=response_shapes.one("route", shape.Route))
def update_route(call: Call, org: str, server: str, id: int):
    srv = lookup.server(call.db, call.principal, org, server, "routes.manage")
    body = call.body
    route = routes.update_route(call.db, routes.find_route(call.db, srv, id), name=body.name,
                                mode=body.mode, endpoint=body.endpoint,
                                endpoint_set="endpoint" in body.model_fields_set)
    return {"route": management.route(call.db, route)}


@endpoint(bp, SERVER + "/routes/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("route", shape.Route))
def delete_route(call: Call, org: str, server: str, id: int):
    srv = lookup.server(call.db, call.principal, org, server, "routes.manage")
    route = routes.find_route(call.db, srv, id)
    result = management.route(call.db, route)
    call.db.delete(route)
    return {"route": result, "deleted": True}
