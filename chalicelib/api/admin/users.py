"""Management: user accounts (instance admins and admin API keys only)."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api.accounts.session import client
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies import accounts as schemas
from chalicelib.api.response_builders import accounts as records
from chalicelib.services.accounts import users as accounts, administration
from chalicelib.services.accounts.permissions import authorize
from chalicelib.response_shapes import accounts as shape

bp = Blueprint(__name__)


@endpoint(bp, "/users", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("users", shape.User))
def list_users(call: Call):
    authorize(call.principal, "users.manage")
    rows, pagination = paginate(call.db, administration.users_query(), *call.page_args())
    return {"users": [records.user(u) for u in rows], "pagination": pagination}


@endpoint(bp, "/users", "POST", auth=ADMIN, body=schemas.UserIn, status=201,
          response=response_shapes.one("user", shape.User))
def create_user(call: Call):
    authorize(call.principal, "users.manage")
    b = call.body
    user = administration.create(call.db, call.principal, client(call), email=b.email_address,
                        first_name=b.first_name, last_name=b.last_name, password=b.password,
                        admin=b.admin)
    return {"user": records.user(user)}


@endpoint(bp, "/users/{id}", "GET", auth=ADMIN,
          response=shape.Me)
def show_user(call: Call, id: int):
    authorize(call.principal, "users.manage")
    user = administration.find(call.db, id)
    return {"user": records.user(user),
            "memberships": [records.membership(m) for m in accounts.memberships(call.db, user)]}


@endpoint(bp, "/users/{id}", "PATCH", auth=ADMIN, body=schemas.UserUpdate,
          response=response_shapes.one("user", shape.User))
def update_user(call: Call, id: int):
    authorize(call.principal, "users.manage")
    user = administration.update(call.db, call.principal, client(call), administration.find(call.db, id),
                        call.body.model_dump(exclude_unset=True))
    return {"user": records.user(user)}


@endpoint(bp, "/users/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("user", shape.User))
def delete_user(call: Call, id: int):
    authorize(call.principal, "users.manage")
    user = administration.find(call.db, id)
    record = records.user(user)
    administration.delete(call.db, call.principal, client(call), user)
    return {"user": record, "deleted": True}


@endpoint(bp, "/users/{id}/password_reset", "POST", auth=ADMIN, status=201,
          response=shape.PasswordResetAnswer)
def issue_password_reset(call: Call, id: int):
    """The operator's way to hand a user a reset link (the service sends no mail)."""
    authorize(call.principal, "users.manage")
    user = administration.find(call.db, id)
    return {"password_reset": accounts.issue_password_reset(call.db, user, client(call),
                                                            by=administration.actor(call.principal))}
