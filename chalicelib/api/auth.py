"""Turning request headers into a Principal (or 401 Unauthorized), and the tenant the
request's transaction acts for from then on (db/tenancy.py: PostgreSQL's row-level security
reads it): a server's API key acts for its server, an admin API key or an instance admin for
every tenant, a signed-in person for themself (services/organizations/lookup.py narrows it
to an organization, and ``X-Server`` to one server)."""
from __future__ import annotations

from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.api.principal import ADMIN, NONE, SERVER, SERVER_READ, SESSION, Principal
from chalicelib.db import tenancy
from chalicelib.services.accounts import admin_keys, sessions
from chalicelib.services.organizations import credentials, lookup
from chalicelib.services.security import throttle

# The messaging surface with a signed-in user instead of an API key (the console): the
# server is named by this header as "<org>/<server>", and the user's role in that
# organization decides (reads: messages.read, writes: messages.manage).
SERVER_HEADER = "x-server"


def bearer_token(request) -> str | None:
    header = request.headers.get("authorization") or ""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _user_principal(db: Session, token: str) -> Principal:
    session = sessions.authenticate_session(db, token)
    user = session.user
    tenancy.act(db, tenancy.instance_admin(user.id) if user.admin else tenancy.for_user(user.id))
    return Principal(kind="user", user=user, session=session)


def _user_on_server(db: Session, request, token: str, reads: bool) -> Principal:
    principal = _user_principal(db, token)
    named = (request.headers.get(SERVER_HEADER) or "").strip()
    org, _, server = named.partition("/")
    if not org or not server:
        raise errors.ValidationError("with a Bearer session, name the server in the X-Server "
                                     "header as <organization>/<server> (permalinks)",
                                     field="X-Server")
    action = "messages.read" if reads or request.method in ("GET", "HEAD") else "messages.manage"
    principal.server = lookup.server(db, principal, org, server, action)
    tenancy.act(db, tenancy.for_server(principal.server.id, principal.user.id))
    return principal


def authenticate(mode: str, request, db: Session) -> Principal | None:
    if mode == NONE:
        return None
    if mode in (SERVER, SERVER_READ):
        key = request.headers.get("x-server-api-key")
        token = bearer_token(request)
        if not key and token:
            return _user_on_server(db, request, token, reads=mode == SERVER_READ)
        credential = credentials.authenticate_key(db, key, "API")
        tenancy.act(db, tenancy.for_server(credential.server_id))
        throttle.take(db, credential.id)
        return Principal(kind="server", server=credential.server, credential=credential)
    if mode == ADMIN:
        key = request.headers.get("x-admin-api-key")
        if key:
            admin_key = admin_keys.authenticate(db, key)
            tenancy.act(db, tenancy.instance_admin())
            return Principal(kind="admin_key", admin_key=admin_key)
        token = bearer_token(request)
        if token:
            return _user_principal(db, token)
        raise errors.Unauthorized("send X-Admin-API-Key or Authorization: Bearer <session token>")
    if mode == SESSION:
        token = bearer_token(request)
        if not token:
            raise errors.Unauthorized("send Authorization: Bearer <session token>")
        return _user_principal(db, token)
    raise ValueError(f"unknown auth mode {mode}")
