"""Server credentials: API keys (HTTP messaging), SMTP keys (submission passwords) and SMTP-IP
(an address or network allowed to submit without a password). Keys are shown once.

Finding the credential a key or an address belongs to is a lookup across tenants (the key
names the server): the one place that does it, ``tenancy.across_tenants(db,
"credential-lookup")``; the caller then acts for the credential's server."""
from __future__ import annotations

import ipaddress
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from chalicelib import clock, errors, observability
from chalicelib.db import tenancy
from chalicelib.db.models import Credential, Server
from chalicelib.services.security.tokens import generate_secret, hash_secret, hint

TYPES = ("API", "SMTP", "SMTP-IP")


def create_credential(db: Session, server: Server, *, type: str, name: str,
                      ip_range: str | None = None, hold: bool = False) -> tuple[Credential, str | None]:
    if type not in TYPES:
        raise errors.ValidationError(f"type: must be one of {', '.join(TYPES)}", field="type")
    key = None
    credential = Credential(server_id=server.id, type=type, name=name, hold=hold)
    if type == "SMTP-IP":
        if not ip_range:
            raise errors.ParameterMissing("ip_range is required for an SMTP-IP credential",
                                          field="ip_range")
        try:
            credential.ip_range = str(ipaddress.ip_network(ip_range.strip(), strict=False))
        except ValueError:
            raise errors.ValidationError(
                f"ip_range: {ip_range!r} is not an IP address or network", field="ip_range") from None
    else:
        key = generate_secret(nbytes=24)
        credential.key_hash = hash_secret(key)
        credential.key_hint = hint(key)
    db.add(credential)
    db.flush()
    return credential, key


def find_credential(db: Session, server: Server, credential_id: int) -> Credential:
    credential = db.get(Credential, credential_id)
    if credential is None or credential.server_id != server.id:
        raise errors.NotFound(f"no credential {credential_id} on this server")
    return credential


def update_credential(credential: Credential, *, name: str | None, hold: bool | None) -> Credential:
    if name is not None:
        credential.name = name
    if hold is not None:
        credential.hold = hold
    return credential


def _touch(credential: Credential) -> None:
    now = clock.now()
    if credential.last_used_at is None or now - credential.last_used_at > timedelta(minutes=1):
        credential.last_used_at = now


def authenticate_key(db: Session, key: str | None, type: str) -> Credential:
    """The credential of ``type`` whose key this is, with its server loaded; raises
    Unauthorized for an unknown key, or a held credential."""
    if not key:
        raise errors.Unauthorized("missing credential")
    with tenancy.across_tenants(db, "credential-lookup"):
        credential = db.scalar(select(Credential).options(joinedload(Credential.server))
                               .where(Credential.key_hash == hash_secret(key)))
        if credential is None or credential.type != type:
            observability.log("credential.rejected", "warning", credential_type=type)
            raise errors.Unauthorized("invalid credential")
        if credential.hold:
            raise errors.Unauthorized("this credential is on hold")
        _touch(credential)
    return credential


def is_held_key(db: Session, key: str | None, type: str) -> bool:
    """Whether ``key`` is the key of a credential of ``type`` that is on hold (the SMTP
    gateway answers those differently from a wrong key)."""
    if not key:
        return False
    with tenancy.across_tenants(db, "credential-lookup"):
        return db.scalar(select(Credential.id).where(
            Credential.key_hash == hash_secret(key), Credential.type == type,
            Credential.hold.is_(True))) is not None


def authenticate_ip(db: Session, address: str) -> Credential | None:
    """An SMTP-IP credential (not held) whose network contains ``address``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    with tenancy.across_tenants(db, "credential-lookup"):
        for credential in db.scalars(select(Credential).options(joinedload(Credential.server))
                                     .where(Credential.type == "SMTP-IP",
                                            Credential.hold.is_(False))):
            if ip in ipaddress.ip_network(credential.ip_range, strict=False):
                _touch(credential)
                return credential
    return None
