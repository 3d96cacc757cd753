"""Management: a sending domain's DNS health check and DKIM key rotation (ours; issue 15)."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api.response_builders import management
from chalicelib.api.framework import ADMIN, Call, endpoint
from chalicelib.services.domains import manage
from chalicelib.services.organizations import lookup
from chalicelib import response_shapes
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
DOMAIN = "/organizations/{org}/servers/{server}/domains/{name}"


@endpoint(bp, DOMAIN + "/check", "GET", auth=ADMIN,
          response=response_shapes.one("check", shape.DnsCheck))
def check_domain(call: Call, org: str, server: str, name: str):
    from chalicelib.services.domains import checks  # dnspython: not at cold start

    srv = lookup.server(call.db, call.principal, org, server, "domains.read")
    domain = manage.find_domain(call.db, srv, name)
    return {"check": checks.check_domain(call.db, domain)}


@endpoint(bp, DOMAIN + "/dkim/rotate", "POST", auth=ADMIN,
          response=response_shapes.one("domain", shape.Domain))
def rotate_dkim(call: Call, org: str, server: str, name: str):
    from chalicelib.services.dkim import rotation as dkim_rotation

    srv = lookup.server(call.db, call.principal, org, server, "domains.manage")
    domain = manage.find_domain(call.db, srv, name)
    dkim_rotation.rotate(call.db, domain)
    return {"domain": management.domain(domain)}


@endpoint(bp, DOMAIN + "/dkim/activate", "POST", auth=ADMIN,
          response=response_shapes.one("domain", shape.Domain))
def activate_dkim(call: Call, org: str, server: str, name: str):
    from chalicelib.services.dkim import rotation as dkim_rotation

    srv = lookup.server(call.db, call.principal, org, server, "domains.manage")
    domain = manage.find_domain(call.db, srv, name)
    return {"domain": management.domain(dkim_rotation.activate(call.db, domain))}
