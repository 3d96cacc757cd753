"""Management: a server's sending domains and credentials."""
from __future__ import annotations

from chalice import Blueprint
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from chalicelib import response_shapes
from chalicelib.api.response_builders import management
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies.admin import CredentialIn, CredentialUpdate, DomainIn
from chalicelib.db.models import Credential, Domain
from chalicelib.services.organizations import credentials, lookup
from chalicelib.services.domains import manage
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
SERVER = "/organizations/{org}/servers/{server}"


@endpoint(bp, SERVER + "/domains", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("domains", shape.Domain))
def list_domains(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.read")
    stmt = select(Domain).where(Domain.server_id == srv.id).order_by(Domain.id) \
        .options(selectinload(Domain.other_dkim_keys))  # listed in every record
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"domains": [management.domain(d) for d in rows], "pagination": pagination}


@endpoint(bp, SERVER + "/domains", "POST", auth=ADMIN, body=DomainIn, status=201,
          response=response_shapes.one("domain", shape.Domain))
def create_domain(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.manage")
    return {"domain": management.domain(manage.create_domain(call.db, srv, call.body.name))}


@endpoint(bp, SERVER + "/domains/{name}", "GET", auth=ADMIN,
          response=response_shapes.one("domain", shape.Domain))
def show_domain(call: Call, org: str, server: str, name: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.read")
    return {"domain": management.domain(manage.find_domain(call.db, srv, name))}


@endpoint(bp, SERVER + "/domains/{name}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("domain", shape.Domain))
def delete_domain(call: Call, org: str, server: str, name: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.manage")
    domain = manage.find_domain(call.db, srv, name)
    record = management.domain(domain)
    manage.delete_domain(call.db, domain)
    return {"domain": record, "deleted": True}


@endpoint(bp, SERVER + "/domains/{name}/verify", "POST", auth=ADMIN,
          response=response_shapes.one("domain", shape.Domain))
def verify_domain(call: Call, org: str, server: str, name: str):
    srv = lookup.server(call.db, call.principal, org, server, "domains.manage")
    return {"domain": management.domain(manage.verify_domain(manage.find_domain(call.db, srv, name)))}


@endpoint(bp, SERVER + "/credentials", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("credentials", shape.Credential))
def list_credentials(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "credentials.read")
    stmt = select(Credential).where(Credential.server_id == srv.id).order_by(Credential.id)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"credentials": [management.credential(c) for c in rows], "pagination": pagination}


@endpoint(bp, SERVER + "/credentials", "POST", auth=ADMIN, body=CredentialIn, status=201,
          response=response_shapes.one("credential", shape.Credential))
def create_credential(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "credentials.manage")
    credential, key = credentials.create_credential(
        call.db, srv, type=call.body.type, name=call.body.name, ip_range=call.body.ip_range,
        hold=call.body.hold)
    return {"credential": management.credential(credential, key)}


@endpoint(bp, SERVER + "/credentials/{id}", "GET", auth=ADMIN,
          response=response_shapes.one("credential", shape.Credential))
def show_credential(call: Call, org: str, server: str, id: int):
    srv = lookup.server(call.db, call.principal, org, server, "credentials.read")
    return {"credential": management.credential(credentials.find_credential(call.db, srv, id))}


@endpoint(bp, SERVER + "/credentials/{id}", "PATCH", auth=ADMIN, body=CredentialUpdate,
          response=response_shapes.one("credential", shape.Credential))
def update_credential(call: Call, org: str, server: str, id: int):
    srv = lookup.server(call.db, call.principal, org, server, "credentials.manage")
    credential = credentials.update_credential(credentials.find_credential(call.db, srv, id),
                                               name=call.body.name, hold=call.body.hold)
    return {"credential": management.credential(credential)}


@endpoint(bp, SERVER + "/credentials/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("credential", shape.Credential))
def delete_credential(call: Call, org: str, server: str, id: int):
    srv = lookup.server(call.db, call.principal, org, server, "credentials.manage")
    credential = credentials.find_credential(call.db, srv, id)
    record = management.credential(credential)
    call.db.delete(credential)
    return {"credential": record, "deleted": True}
