"""Who is submitting: an SMTP credential's key given as the AUTH password (any user name), or
an SMTP-IP credential covering the client's address. Database work runs in the gateway's
thread pool so a slow query never stalls the event loop. Once the credential is found, the
transaction acts for its server (db/tenancy.py), as a request with an API key does."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db import session_scope, tenancy
from chalicelib.db.models import Server
from chalicelib.services.organizations import credentials
from chalicelib.smtp.ratelimit import AuthFailureLimiter

# Replies (RFC 4954 / 3463 enhanced codes).
INVALID = "535 5.7.8 Authentication credentials invalid"
HELD = "535 5.7.8 Authentication refused: this credential is on hold"
SUSPENDED = "554 5.7.1 Server suspended: sending is disabled for this server"
TOO_MANY = "454 4.7.0 Too many failed authentication attempts; try again later"
TEMPORARY_FAILURE = "454 4.7.0 Temporary authentication failure"


@dataclass(frozen=True)
class Identity:
    """An authenticated submitter: the server mail is sent for."""

    server_id: int
    credential_id: int
    kind: str  # SMTP or SMTP-IP

    def __repr__(self) -> str:  # never log anything secret-looking
        return f"Identity(server={self.server_id}, credential={self.credential_id}, {self.kind})"


@dataclass(frozen=True)
class AuthOutcome:
    identity: Identity | None
    reply: str | None  # the SMTP reply when refused
    counts_as_failure: bool = False


def authenticate(limiter: AuthFailureLimiter, client: str, password: str) -> AuthOutcome:
    """AUTH in one transaction (one hand-off to the pool, no extra round trips when all is
    well): refused outright past the client's failure limit; a success clears the client's
    failures when it has any. A failure is counted by the caller (limiter.record_failure),
    which also slows the answer."""
    with session_scope() as db:
        failures = limiter.failures(db, client)
        if failures >= limiter.max_failures:
            return AuthOutcome(None, TOO_MANY)
        outcome = _check_key(db, password)
        if outcome.identity is not None and failures:
            limiter.clear(db, client)
        return outcome


def _check_key(db: Session, password: str) -> AuthOutcome:
    try:
        credential = credentials.authenticate_key(db, password, "SMTP")
    except errors.Unauthorized:
        if credentials.is_held_key(db, password, "SMTP"):
            return AuthOutcome(None, HELD)
        return AuthOutcome(None, INVALID, counts_as_failure=True)
    tenancy.act(db, tenancy.for_server(credential.server_id))
    if credential.server.suspended:
        return AuthOutcome(None, SUSPENDED)
    return AuthOutcome(Identity(credential.server_id, credential.id, "SMTP"), None)


def check_ip(address: str | None) -> Identity | None:
    if not address:
        return None
    with session_scope() as db:
        credential = credentials.authenticate_ip(db, address)
        if credential is None:
            return None
        tenancy.act(db, tenancy.for_server(credential.server_id))
        return Identity(credential.server_id, credential.id, "SMTP-IP")


def server_suspended(server_id: int) -> bool:
    with session_scope() as db:
        tenancy.act(db, tenancy.for_server(server_id))
        server = db.get(Server, server_id)
        return server is None or server.suspended
