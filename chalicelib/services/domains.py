"""Sending domains: each gets its own RSA-2048 DKIM key and three TXT records to publish."""
from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.models import Domain, Server
from chalicelib.services import keys


def _dkim():
    # dkimpy pulls in dnspython (~80 ms); only domain creation and DNS records need it, so a
    # Lambda cold start does not pay for it.
    from chalicelib.services import dkim_signing

    return dkim_signing


def normalize_domain(name: str, field: str = "name") -> str:
    value = (name or "").strip().rstrip(".").lower()
    try:
        ascii_name = value.encode("idna").decode("ascii")
    except UnicodeError:
        raise errors.ValidationError(f"{field}: {name!r} is not a valid domain name",
                                     field=field) from None
    labels = ascii_name.split(".")
    valid = (len(labels) >= 2 and len(ascii_name) <= 253 and all(
        0 < len(label) <= 63 and not label.startswith("-") and not label.endswith("-")
        and all(c.isalnum() or c == "-" for c in label) for label in labels))
    if not valid:
        raise errors.ValidationError(f"{field}: {name!r} is not a valid domain name", field=field)
    return ascii_name


def create_domain(db: Session, server: Server, name: str) -> Domain:
    ascii_name = normalize_domain(name)
    if db.scalar(select(Domain).where(Domain.server_id == server.id, Domain.name == ascii_name)):
        raise errors.ValidationError(f"name: {ascii_name} is already a domain of this server",
                                     field="name")
    private_pem, public_b64 = _dkim().generate_key()
    selector = f"{get_settings().dkim_selector}-{secrets.token_hex(3)}"
    domain = Domain(server_id=server.id, name=ascii_name,
                    verification_token=secrets.token_urlsafe(24), dkim_selector=selector,
                    dkim_private_key_encrypted=keys.secret_box().encrypt(private_pem),
                    dkim_public_key=public_b64)
    db.add(domain)
    db.flush()
    return domain


def dkim_private_key(domain: Domain) -> bytes:
    return keys.secret_box().decrypt(domain.dkim_private_key_encrypted)


def dns_records(domain: Domain) -> dict:
    settings = get_settings()
    return {
        "verification": {"type": "TXT", "name": domain.name,
                         "value": f"email-service-verification={domain.verification_token}"},
        "spf": {"type": "TXT", "name": domain.name,
                "value": f"v=spf1 a mx include:{settings.effective_spf_include} ~all"},
        "dkim": {"type": "TXT", "name": f"{domain.dkim_selector}._domainkey.{domain.name}",
                 "value": _dkim().dns_record_value(domain.dkim_public_key)},
    }


def find_domain(db: Session, server: Server, name: str) -> Domain:
    try:
        ascii_name = normalize_domain(name)
    except errors.ValidationError:
        raise errors.NotFound(f"no domain {name!r}") from None
    domain = db.scalar(select(Domain).where(Domain.server_id == server.id,
                                            Domain.name == ascii_name))
    if domain is None:
        raise errors.NotFound(f"no domain {name!r} on this server")
    return domain


def verify_domain(domain: Domain) -> Domain:
    """Mark the domain verified; with DOMAIN_VERIFY_DNS, only once its verification TXT
    record is published (proof that the tenant controls the domain's DNS)."""
    if get_settings().domain_verify_dns:
        check_verification_record(domain)
    domain.verified_at = domain.verified_at or clock.now()
    return domain


def check_verification_record(domain: Domain) -> None:
    from chalicelib.services import dns_lookup  # dnspython: not at cold start

    expected = dns_records(domain)["verification"]["value"]
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
