"""Management: the reputation guard of a server and infrastructure signals (services/
reputation/): a server's guard with its figures, a domain's signals, and every signal of the
installation for instance admins. (Lifting a pause is POST .../unsuspend, in
organizations.py.)"""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import errors, response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.response_builders import management
from chalicelib.services.accounts.permissions import authorize
from chalicelib.services.domains import manage
from chalicelib.services.organizations import lookup
from chalicelib.services.reputation import signals
from chalicelib.response_shapes import reputation as shape

bp = Blueprint(__name__)
SERVER = "/organizations/{org}/servers/{server}"
SINCE = q.date_time("since", "Only signals from this time on.")
BLAMES = q.string("blames", "Only signals blaming this: ip or domain.",
                  enum=(signals.IP, signals.DOMAIN))


@endpoint(bp, SERVER + "/reputation", "GET", auth=ADMIN,
          response=response_shapes.one("reputation", shape.Reputation))
def show_reputation(call: Call, org: str, server: str):
    """The reputation guard's view of the server now: its bounce and complaint rates over
    the window, the thresholds, what they say, and its state (a pause and who lifted it)."""
    srv = lookup.server(call.db, call.principal, org, server, "servers.read")
    return {"reputation": management.reputation(call.db, srv)}


@endpoint(bp, SERVER + "/domains/{name}/signals", "GET", auth=ADMIN,
          query=(*q.PAGINATION, BLAMES, SINCE),
          response=response_shapes.page("signals", shape.InfrastructureSignal))
def list_domain_signals(call: Call, org: str, server: str, name: str):
    """Refusals of the domain's mail that blamed the sending IP or the domain, newest
    first."""
    srv = lookup.server(call.db, call.principal, org, server, "domains.read")
    domain = manage.find_domain(call.db, srv, name)
    stmt = signals.list_stmt(server_id=srv.id, domain_id=domain.id,
                             blames=call.query_str("blames"),
                             since=call.query_datetime("since"))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"signals": [management.infrastructure_signal(r) for r in rows],
            "pagination": pagination}


@endpoint(bp, "/infrastructure_signals", "GET", auth=ADMIN, query=(
    *q.PAGINATION, BLAMES, SINCE,
    q.string("source_address", "Only signals of mail sent from this IP address."),
    q.integer("ip_pool_id", "Only signals of mail sent from this IP pool.", minimum=1,
              maximum=q.MAX_INT32),
    q.integer("server_id", "Only signals of this server's mail.", minimum=1,
              maximum=q.MAX_INT32)),
          response=response_shapes.page("signals", shape.InfrastructureSignal))
def list_signals(call: Call):
    """Every refusal that blamed the installation's sending IPs or its tenants' domains,
    newest first (instance admins)."""
    authorize(call.principal, "infrastructure_signals.read")
    source = call.query_str("source_address")
    if source is not None:
        from ipaddress import ip_address

        try:
            source = str(ip_address(source))
        except ValueError:
            raise errors.ValidationError("source_address: not an IP address",
                                         field="source_address") from None
    stmt = signals.list_stmt(source_address=source, ip_pool_id=call.query_int("ip_pool_id"),
                             server_id=call.query_int("server_id"),
                             blames=call.query_str("blames"),
                             since=call.query_datetime("since"))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"signals": [management.infrastructure_signal(r) for r in rows],
            "pagination": pagination}
