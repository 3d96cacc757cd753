"""Management: organizations and their servers."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import errors, response_shapes
from chalicelib.api.response_builders import management
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies.admin import IPPoolAssign, OrganizationIn, OrganizationUpdate, ServerIn, \
    ServerUpdate, SuspendIn
from chalicelib.config import get_settings
from chalicelib.db.models import Server
from chalicelib.services.organizations import lookup, organizations
from chalicelib.services.accounts import audit, permissions
from chalicelib.services.reputation import guard
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
ORG = "/organizations/{org}"
SERVER = ORG + "/servers/{server}"


@endpoint(bp, "/organizations", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("organizations", shape.Organization))
def list_organizations(call: Call):
    rows, pagination = paginate(call.db, organizations.organizations_query(call.principal),
                                *call.page_args())
    return {"organizations": [management.organization(o) for o in rows], "pagination": pagination}


@endpoint(bp, "/organizations", "POST", auth=ADMIN, body=OrganizationIn, status=201,
          response=response_shapes.one("organization", shape.Organization))
def create_organization(call: Call):
    principal = call.principal
    if principal.kind == "user" and not permissions.is_full_access(principal) \
            and not get_settings().auth_allow_organization_creation:
        raise errors.Forbidden("organization creation is disabled on this installation")
    org = organizations.create_organization(call.db, principal, name=call.body.name,
                                            permalink=call.body.permalink,
                                            time_zone=call.body.time_zone)
    return {"organization": management.organization(org)}


@endpoint(bp, ORG, "GET", auth=ADMIN,
          response=response_shapes.one("organization", shape.Organization))
def show_organization(call: Call, org: str):
    return {"organization": management.organization(
        lookup.organization(call.db, call.principal, org, "organization.read"))}


@endpoint(bp, ORG, "PATCH", auth=ADMIN, body=OrganizationUpdate,
          response=response_shapes.one("organization", shape.Organization))
def update_organization(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "organization.update")
    organizations.update_organization(call.db, found, name=call.body.name,
                                      time_zone=call.body.time_zone)
    return {"organization": management.organization(found)}


@endpoint(bp, ORG, "DELETE", auth=ADMIN,
          response=response_shapes.deleted("organization", shape.Organization))
def delete_organization(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "organization.delete")
    record = management.organization(found)
    organizations.delete_organization(call.db, found)
    return {"organization": record, "deleted": True}


@endpoint(bp, ORG + "/servers", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("servers", shape.Server))
def list_servers(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "servers.read")
    from sqlalchemy import select

    stmt = select(Server).where(Server.organization_id == found.id).order_by(Server.id)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"servers": [management.server(s) for s in rows], "pagination": pagination}


@endpoint(bp, ORG + "/servers", "POST", auth=ADMIN, body=ServerIn, status=201,
          response=response_shapes.one("server", shape.Server))
def create_server(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "servers.manage")
    srv = organizations.create_server(call.db, found, name=call.body.name,
                                      permalink=call.body.permalink, mode=call.body.mode)
    return {"server": management.server(srv)}


@endpoint(bp, SERVER, "GET", auth=ADMIN,
          response=response_shapes.one("server", shape.Server))
def show_server(call: Call, org: str, server: str):
    return {"server": management.server(lookup.server(call.db, call.principal, org, server,
                                                   "servers.read"))}


@endpoint(bp, SERVER, "PATCH", auth=ADMIN, body=ServerUpdate,
          response=response_shapes.one("server", shape.Server))
def update_server(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "servers.manage")
    organizations.update_server(srv, call.body.model_dump(exclude_unset=True))
    return {"server": management.server(srv)}


@endpoint(bp, SERVER, "DELETE", auth=ADMIN,
          response=response_shapes.deleted("server", shape.Server))
def delete_server(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "servers.manage")
    record = management.server(srv)
    call.db.delete(srv)
    return {"server": record, "deleted": True}


@endpoint(bp, SERVER + "/suspend", "POST", auth=ADMIN, body=SuspendIn,
          response=response_shapes.one("server", shape.Server))
def suspend_server(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "servers.manage")
    return {"server": management.server(organizations.suspend_server(srv, call.body.reason))}


@endpoint(bp, SERVER + "/unsuspend", "POST", auth=ADMIN,
          response=response_shapes.one("server", shape.Server))
def unsuspend_server(call: Call, org: str, server: str):
    """Lift the suspension. A pause by the reputation guard is lifted by instance admins
    only (403 for the organization's own roles), and restarts the guard's window."""
    srv = lookup.server(call.db, call.principal, org, server, "servers.manage")
    if guard.paused(call.db, srv):
        if not permissions.can(call.principal, "reputation.lift"):
            raise errors.Forbidden(
                "the reputation guard paused this server's sending "
                f"({srv.suspension_reason}); only an instance administrator can lift the pause")
        principal = call.principal
        by = (f"admin API key {principal.admin_key.id}" if principal.is_admin_key
              else f"user {principal.user.id} ({principal.user.email_address})")
        guard.lift(call.db, srv, by=by, user=principal.user,
                   client=audit.Client(call.ip_address, call.user_agent))
    return {"server": management.server(organizations.unsuspend_server(srv))}


@endpoint(bp, SERVER + "/ip_pool", "POST", auth=ADMIN, body=IPPoolAssign,
          response=response_shapes.one("server", shape.Server))
def assign_ip_pool(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "servers.manage")
    return {"server": management.server(organizations.assign_ip_pool(call.db, srv,
                                                                  call.body.ip_pool_id))}
