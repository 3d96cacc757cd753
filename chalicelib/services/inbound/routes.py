"""Inbound routes: which addresses of a server's domains accept mail, and what happens to it.

A route is ``name@domain`` (``name`` a local part, or ``*`` for the whole domain) with a mode:
``endpoint`` (deliver to its endpoint), ``accept`` (store only), ``hold`` (store held; a
bypass delivers it to the endpoint when one is set), ``bounce`` (store, and refuse the mail to
the sender) or ``reject`` (refused at RCPT TO, nothing stored). Matching happens at RCPT TO
and only on verified domains, so a tenant cannot claim mail for a domain it does not own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db import unique
from chalicelib.db.models import Domain, Route, Server
from chalicelib.services.domains import manage as domains, names as domain_names

MODES = ("endpoint", "accept", "hold", "bounce", "reject")
ENDPOINT_TYPES = ("http", "smtp", "address")
HTTP_FORMATS = ("json", "raw")
_LOCAL_PART = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$")
_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}$|^\[[0-9A-Fa-f:.]+\]$")


def _fail(field: str, message: str) -> errors.ValidationError:
    return errors.ValidationError(f"{field}: {message}", field=field)


def normalize_name(name: str | None) -> str:
    value = (name or "").strip().lower()
    if value == "*":
        return value
    if not _LOCAL_PART.match(value) or value.startswith(".") or value.endswith(".") or ".." in value:
        raise _fail("name", f"{name!r} is not a local part (the part before @) or '*'")
    return value


def normalize_endpoint(endpoint: dict | None) -> dict | None:
    """Validate an endpoint object and return its canonical form."""
    if endpoint is None:
        return None
    if not isinstance(endpoint, dict):
        raise _fail("endpoint", "must be an object with a type (http, smtp or address)")
    kind = endpoint.get("type")
    if kind not in ENDPOINT_TYPES:
        raise _fail("endpoint.type", f"must be one of {', '.join(ENDPOINT_TYPES)}")
    if kind == "http":
        url = endpoint.get("url")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise _fail("endpoint.url", "must be an http or https URL")
        fmt = endpoint.get("format", "json")
        if fmt not in HTTP_FORMATS:
            raise _fail("endpoint.format", "must be json (parsed parts and the raw message) "
                                           "or raw (the MIME message as is)")
        return {"type": "http", "url": url, "format": fmt}
    if kind == "smtp":
        host, port = endpoint.get("host"), endpoint.get("port", 25)
        if not isinstance(host, str) or not _HOST.match(host):
            raise _fail("endpoint.host", "must be a host name or IP address")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise _fail("endpoint.port", "must be an integer between 1 and 65535")
        # STARTTLS is used whenever the endpoint offers it (as for outgoing delivery).
        return {"type": "smtp", "host": host, "port": port}
    address = endpoint.get("address")
    if not isinstance(address, str) or address.count("@") != 1:
        raise _fail("endpoint.address", "must be an email address")
    local, domain = address.strip().rsplit("@", 1)
    if not local:
        raise _fail("endpoint.address", "must be an email address")
    domain_names.normalize_domain(domain, "endpoint.address")
    return {"type": "address", "address": address.strip()}


def _check_mode(mode: str, endpoint: dict | None) -> None:
    if mode not in MODES:
        raise _fail("mode", f"must be one of {', '.join(MODES)}")
    if mode == "endpoint" and endpoint is None:
        raise errors.ParameterMissing("endpoint is required when mode is endpoint", field="endpoint")


def create_route(db: Session, server: Server, *, name: str, domain: str, mode: str,
                 endpoint: dict | None) -> Route:
    local = normalize_name(name)
    dom = domains.find_domain(db, server, domain) if domain else None
    if dom is None:
        raise errors.ParameterMissing("domain is required", field="domain")
    endpoint = normalize_endpoint(endpoint)
    _check_mode(mode, endpoint)
    taken = _fail("name", f"a route for {local}@{dom.name} already exists")
    if db.scalar(select(Route.id).where(Route.domain_id == dom.id, Route.name == local)):
        raise taken
    route = Route(server_id=server.id, domain_id=dom.id, name=local, mode=mode, endpoint=endpoint)
    with unique.guard(db, taken):
        db.add(route)
    return route


def update_route(db: Session, route: Route, *, name: str | None = None, mode: str | None = None,
                 endpoint: dict | None = None, endpoint_set: bool = False) -> Route:
    if name is not None:
        local = normalize_name(name)
        taken = _fail("name", f"a route for {local} already exists on this domain")
        clash = db.scalar(select(Route.id).where(Route.domain_id == route.domain_id,
                                                 Route.name == local, Route.id != route.id))
        if clash:
            raise taken
        with unique.guard(db, taken):  # a rename racing a create
            route.name = local
    new_endpoint = normalize_endpoint(endpoint) if endpoint_set else route.endpoint
    new_mode = mode if mode is not None else route.mode
    _check_mode(new_mode, new_endpoint)
    route.mode, route.endpoint = new_mode, new_endpoint
    return route


def find_route(db: Session, server: Server, route_id: int) -> Route:
    route = db.get(Route, route_id)
    if route is None or route.server_id != server.id:
        raise errors.NotFound(f"no route {route_id} on this server")
    return route


def domain_name(db: Session, route: Route) -> str:
    return db.get(Domain, route.domain_id).name


@dataclass(frozen=True)
class RouteMatch:
    route_id: int
    server_id: int
    mode: str
    address: str


def match(db: Session, address: str) -> RouteMatch | None:
    """The route an incoming RCPT TO address reaches: the exact local part first, then the
    local part without its +suffix, then the domain's wildcard."""
    local, _, domain = address.rpartition("@")
    if not local or not domain:
        return None
    local, domain = local.lower(), domain.lower().rstrip(".")
    candidates = [local]
    if "+" in local:
        candidates.append(local.split("+", 1)[0])
    candidates.append("*")
    rows = db.execute(
        select(Route.id, Route.server_id, Route.mode, Route.name)
        .join(Domain, Domain.id == Route.domain_id)
        .where(func.lower(Domain.name) == domain, Domain.verified_at.is_not(None),
               Route.name.in_(candidates))
        .order_by(Route.id)).all()
    for candidate in candidates:
        for row in rows:
            if row.name == candidate:
                return RouteMatch(row.id, row.server_id, row.mode, address)
    return None


def domain_has_routes(db: Session, domain: str) -> bool:
    return db.scalar(select(Route.id).join(Domain, Domain.id == Route.domain_id)
                     .where(func.lower(Domain.name) == domain.lower().rstrip("."),
                            Domain.verified_at.is_not(None)).limit(1)) is not None
