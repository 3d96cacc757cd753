"""Management: removing one address's personal data (a data subject's request) on a server,
on every server of an organization (its admins and owners), or on the whole installation
(instance admins and admin API keys). services/privacy/removal.py says what is removed; each
removal is recorded in the audit trail (event ``data_removed``, the address's hash only)."""
from __future__ import annotations

import json

from chalice import Blueprint
from sqlalchemy import select

from chalicelib import response_shapes
from chalicelib.api.framework import ADMIN, Call, endpoint
from chalicelib.api.request_bodies.admin import DataRemovalIn
from chalicelib.db.models import Server
from chalicelib.services.accounts import audit, permissions
from chalicelib.services.organizations import lookup
from chalicelib.services.privacy import removal
from chalicelib.services.suppressions import entries as suppressions
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
ANSWER = response_shapes.one("data_removal", shape.DataRemoval)


def _remove(call: Call, scope: str, where: str, server_ids: list[int]) -> dict:
    address = suppressions.validate_address(call.body.address)
    counts = removal.remove(call.db, server_ids, address,
                            keep_suppression=call.body.keep_suppression)
    result = {"address_hash": suppressions.hashed(address), "scope": scope,
              "servers": len(server_ids), **counts}
    principal = call.principal
    by = (f"admin API key {principal.admin_key.id}" if principal.is_admin_key
          else f"user {principal.user.id}")
    audit.record(call.db, "data_removed", audit.Client(call.ip_address, call.user_agent),
                 user=principal.user,
                 details=f"{scope} {where} by {by}: " + json.dumps(result, sort_keys=True))
    return {"data_removal": result}


@endpoint(bp, "/organizations/{org}/servers/{server}/data_removal", "POST", auth=ADMIN,
          body=DataRemovalIn, response=ANSWER)
def remove_on_server(call: Call, org: str, server: str):
    """Remove an address's messages' content and personal fields on this server; its
    suppressions are kept as a hash unless keep_suppression is false."""
    srv = lookup.server(call.db, call.principal, org, server, "data.remove")
    return _remove(call, "server", f"{org}/{server}", [srv.id])


@endpoint(bp, "/organizations/{org}/data_removal", "POST", auth=ADMIN, body=DataRemovalIn,
          response=ANSWER)
def remove_in_organization(call: Call, org: str):
    """The same on every server of the organization."""
    organization = lookup.organization(call.db, call.principal, org, "data.remove")
    ids = list(call.db.scalars(select(Server.id).where(
        Server.organization_id == organization.id).order_by(Server.id)))
    return _remove(call, "organization", org, ids)


@endpoint(bp, "/data_removal", "POST", auth=ADMIN, body=DataRemovalIn, response=ANSWER)
def remove_everywhere(call: Call):
    """The same on every server of the installation (instance admins, admin API keys)."""
    permissions.authorize(call.principal, "data.remove_installation")
    ids = list(call.db.scalars(select(Server.id).order_by(Server.id)))
    return _remove(call, "installation", "all servers", ids)
