"""Sending domains of a server: adding one (with its own RSA-2048 DKIM key), finding it,
changing its return-path and tracking hosts, verifying it, and removing it.

The return path and tracking domain are used only once their CNAME is verified: by a DNS
check (``checks.py``), or by ``verify`` when DOMAIN_VERIFY_DNS is off. A return-path host the
domain stops using (changed, or the domain removed) is retired, not forgotten: bounces and
feedback reports for mail sent with it keep arriving there for days, and the gateway accepts
them while that mail is kept (``RetiredReturnPath``: the server's message retention)."""
from __future__ import annotations

import secrets
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db import unique
from chalicelib.db.models import Domain, RetiredReturnPath, Server
from chalicelib.services.dkim import keys as dkim_keys
from chalicelib.services.domains import names, records, reserved


def create_domain(db: Session, server: Server, name: str) -> Domain:
    ascii_name = names.normalize_domain(name)
    reason = reserved.reserved_reason(ascii_name)
    if reason is not None:
        raise errors.ValidationError(f"name: {reason}; add a domain you own", field="name")
    taken = errors.ValidationError(f"name: {ascii_name} is already a domain of this server",
                                   field="name")
    if db.scalar(select(Domain).where(Domain.server_id == server.id, Domain.name == ascii_name)):
        raise taken
    encrypted, public_b64 = dkim_keys.generate()
    domain = Domain(server_id=server.id, name=ascii_name,
                    verification_token=secrets.token_urlsafe(24),
                    dkim_selector=dkim_keys.new_selector(), dkim_private_key_encrypted=encrypted,
                    dkim_public_key=public_b64)
    with unique.guard(db, taken):  # added twice at once (the key generation takes a while)
        db.add(domain)
    return domain


def update_hosts(domain: Domain, *, return_path_host: str | None = None,
                 tracking_host: str | None = None, clear_tracking: bool = False) -> Domain:
    """Change the return-path or tracking host; a changed host must be verified again."""
    if return_path_host is not None:
        host = names.normalize_host(return_path_host, "return_path_host")
        if host == domain.tracking_host and not clear_tracking and tracking_host is None:
            raise errors.ValidationError("return_path_host: must differ from tracking_host",
                                         field="return_path_host")
        if host != domain.return_path_host:
            retire_return_path(object_session(domain), domain)
            domain.return_path_host = host
            domain.return_path_verified_at = None
    if clear_tracking:
        domain.tracking_host = domain.tracking_verified_at = None
    elif tracking_host is not None:
        host = names.normalize_host(tracking_host, "tracking_host")
        if host == domain.return_path_host:
            raise errors.ValidationError("tracking_host: must differ from return_path_host",
                                         field="tracking_host")
        if host != domain.tracking_host:
            domain.tracking_host = host
            domain.tracking_verified_at = None
    return domain


def retire_return_path(db: Session, domain: Domain) -> RetiredReturnPath:
    """Keep accepting bounces at the domain's current return-path host after it stops using
    it, until the mail sent with it is deleted: its server's message retention from now."""
    now = clock.now()
    days = db.scalar(select(Server.message_retention_days).where(Server.id == domain.server_id))
    row = RetiredReturnPath(server_id=domain.server_id, domain_id=domain.id,
                            name=names.return_path_name(domain).lower(), retired_at=now,
                            keep_until=now + timedelta(days=days))
    db.add(row)
    return row


def retention_changed(db: Session, server: Server) -> None:
    """The server keeps its mail ``message_retention_days`` now: its retired return paths
    are kept as long after their retirement."""
    rows = db.scalars(select(RetiredReturnPath).where(RetiredReturnPath.server_id == server.id))
    for row in rows:
        row.keep_until = row.retired_at + timedelta(days=server.message_retention_days)


def delete_domain(db: Session, domain: Domain) -> None:
    """Remove the domain; its return-path host still takes the bounces of its mail."""
    retire_return_path(db, domain)
    db.delete(domain)


def find_domain(db: Session, server: Server, name: str) -> Domain:
    try:
        ascii_name = names.normalize_domain(name)
    except errors.ValidationError:
        raise errors.NotFound(f"no domain {name!r}") from None
    domain = db.scalar(select(Domain).where(Domain.server_id == server.id,
                                            Domain.name == ascii_name))
    if domain is None:
        raise errors.NotFound(f"no domain {name!r} on this server")
    return domain


def verify_domain(domain: Domain) -> Domain:
    """Mark the domain verified; with DOMAIN_VERIFY_DNS, only once its verification TXT
    record is published (proof that the tenant controls the domain's DNS), and the
    return-path and tracking CNAMEs only when they are found. Without it, all of them are
    marked, as the spec reads verify."""
    now = clock.now()
    if get_settings().domain_verify_dns:
        check_verification_record(domain)
        from chalicelib.services.domains import checks  # dnspython: not at cold start

        checks.verify_cnames(domain, now)
    else:
        domain.return_path_verified_at = domain.return_path_verified_at or now
        if domain.tracking_host:
            domain.tracking_verified_at = domain.tracking_verified_at or now
    domain.verified_at = domain.verified_at or now
    return domain


def check_verification_record(domain: Domain) -> None:
    from chalicelib import dns_lookup  # dnspython: not at cold start

    expected = records.dns_records(domain)["verification"]["value"]
    try:
        found = dns_lookup.txt_strings(domain.name)
    except dns_lookup.UNAVAILABLE as exc:
        raise errors.ValidationError(
            f"name: the DNS lookup of {domain.name} TXT failed ({exc.__class__.__name__}); "
            "try again in a moment", field="name") from None
    if expected not in found:
        raise errors.ValidationError(
            f"name: publish the TXT record {expected!r} at {domain.name}, then verify again "
            f"(the domain has {len(found)} TXT record(s), none of them this one)", field="name")


def verified_domain_for(db: Session, server: Server, address_domain: str) -> Domain | None:
    """The verified sending domain of ``server`` that authorizes a From address's domain."""
    return db.scalar(select(Domain).where(Domain.server_id == server.id,
                                          Domain.name == address_domain.lower(),
                                          Domain.verified_at.is_not(None)))
