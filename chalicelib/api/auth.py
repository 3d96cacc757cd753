"""Turning request headers into a Principal (or 401 Unauthorized)."""
from __future__ import annotations

from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.api.framework import ADMIN, NONE, SERVER, SESSION, Principal
from chalicelib.services import admin_keys, credentials, sessions, throttle


def bearer_token(request) -> str | None:
    header = request.headers.get("authorization") or ""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _user_principal(db: Session, token: str) -> Principal:
    session = sessions.authenticate_session(db, token)
    return Principal(kind="user", user=session.user, session=session)


def authenticate(mode: str, request, db: Session) -> Principal | None:
    if mode == NONE:
        return None
    if mode == SERVER:
        key = request.headers.get("x-server-api-key")
        credential = credentials.authenticate_key(db, key, "API")
        throttle.take(db, credential.id)
        return Principal(kind="server", server=credential.server, credential=credential)
    if mode == ADMIN:
        key = request.headers.get("x-admin-api-key")
        if key:
            return Principal(kind="admin_key", admin_key=admin_keys.authenticate(db, key))
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
