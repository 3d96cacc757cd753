"""Management: an organization's members and invitations."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies import accounts as schemas
from chalicelib.api.response_builders import accounts as records
from chalicelib.services.accounts import users, members
from chalicelib.services.organizations import lookup
from chalicelib.response_shapes import accounts as shape

bp = Blueprint(__name__)
ORG = "/organizations/{org}"


@endpoint(bp, ORG + "/members", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("members", shape.Member))
def list_members(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "members.read")
    rows, pagination = paginate(call.db, members.members_query(found), *call.page_args())
    return {"members": [records.member(m) for m in rows], "pagination": pagination}


@endpoint(bp, ORG + "/members", "POST", auth=ADMIN, body=schemas.MemberIn, status=201,
          response=response_shapes.one("member", shape.Member))
def add_member(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "members.manage")
    membership = members.add_member(call.db, call.principal, found, user_id=call.body.user_id,
                                    email=call.body.email_address, role=call.body.role)
    return {"member": records.member(membership)}


@endpoint(bp, ORG + "/members/{user_id}", "GET", auth=ADMIN,
          response=response_shapes.one("member", shape.Member))
def show_member(call: Call, org: str, user_id: int):
    found = lookup.organization(call.db, call.principal, org, "members.read")
    return {"member": records.member(members.find_member(call.db, found, user_id))}


@endpoint(bp, ORG + "/members/{user_id}", "PATCH", auth=ADMIN, body=schemas.RoleIn,
          response=response_shapes.one("member", shape.Member))
def change_role(call: Call, org: str, user_id: int):
    found = lookup.organization(call.db, call.principal, org, "members.manage")
    membership = members.change_role(call.db, call.principal, found, user_id, call.body.role)
    return {"member": records.member(membership)}


@endpoint(bp, ORG + "/members/{user_id}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("member", shape.Member))
def remove_member(call: Call, org: str, user_id: int):
    user = call.principal.user
    leaving = user is not None and user.id == user_id  # anyone may leave (last-owner rule aside)
    found = lookup.organization(call.db, call.principal, org,
                                "organization.read" if leaving else "members.manage")
    membership = members.find_member(call.db, found, user_id)
    record = records.member(membership)
    members.remove_member(call.db, call.principal, found, user_id)
    return {"member": record, "deleted": True}


@endpoint(bp, ORG + "/invitations", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("invitations", shape.Invitation))
def list_invitations(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "invitations.read")
    rows, pagination = paginate(call.db, members.invitations_query(found), *call.page_args())
    return {"invitations": [records.invitation(i) for i in rows], "pagination": pagination}


@endpoint(bp, ORG + "/invitations", "POST", auth=ADMIN, body=schemas.InvitationIn, status=201,
          response=response_shapes.one("invitation", shape.Invitation))
def invite(call: Call, org: str):
    found = lookup.organization(call.db, call.principal, org, "invitations.manage")
    inv, token = members.invite(call.db, call.principal, found, email=call.body.email_address,
                                role=call.body.role)
    return {"invitation": records.invitation(inv, token,
                                             users.frontend_link(f"invitations/{token}"))}


@endpoint(bp, ORG + "/invitations/{id}", "GET", auth=ADMIN,
          response=response_shapes.one("invitation", shape.Invitation))
def show_invitation(call: Call, org: str, id: int):
    found = lookup.organization(call.db, call.principal, org, "invitations.read")
    return {"invitation": records.invitation(members.find_invitation(call.db, found, id))}


@endpoint(bp, ORG + "/invitations/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.one("invitation", shape.Invitation))
def revoke_invitation(call: Call, org: str, id: int):
    found = lookup.organization(call.db, call.principal, org, "invitations.manage")
    inv = members.revoke_invitation(call.db, call.principal,
                                    members.find_invitation(call.db, found, id))
    return {"invitation": records.invitation(inv)}
