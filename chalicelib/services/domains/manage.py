"""Sending domains: each gets its own RSA-2048 DKIM key and the records to publish:
verification, SPF and DKIM TXT records, a DMARC record, the return-path CNAME
(``<return_path_host>.<name>`` -> RETURN_PATH_DOMAIN) and, when set, the tracking CNAME.

The return path and tracking domain are used only once their CNAME is verified: by a DNS
check (services/domain_checks.py), or by ``verify`` when DOMAIN_VERIFY_DNS is off."""
from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.models import Domain, Server
from chalicelib.services.security import keys
from chalicelib.services.domains import reserved
from chalicelib.shapes import builds
from chalicelib.shapes import management as shape


def _dkim():
    # dkimpy pulls in dnspython (~80 ms); only domain creation and DNS records need it, so a
    # Lambda cold start does not pay for it.
    from chalicelib.services.dkim import signer

    return signer


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
    reason = reserved.reserved_reason(ascii_name)
    if reason is not None:
        raise errors.ValidationError(f"name: {reason}; add a domain you own", field="name")
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


def dkim_record(domain: Domain, selector: str, public_key: str) -> dict:
    return {"type": "TXT", "name": f"{selector}._domainkey.{domain.name}",
            "value": _dkim().dns_record_value(public_key)}


def return_path_name(domain: Domain) -> str:
    return f"{domain.return_path_host}.{domain.name}"


def tracking_name(domain: Domain) -> str | None:
    return f"{domain.tracking_host}.{domain.name}" if domain.tracking_host else None


@builds(shape.DnsRecords)
def dns_records(domain: Domain) -> dict:
    settings = get_settings()
    records = {
        "verification": {"type": "TXT", "name": domain.name,
                         "value": f"email-service-verification={domain.verification_token}"},
        "spf": {"type": "TXT", "name": domain.name,
                "value": f"v=spf1 a mx include:{settings.effective_spf_include} ~all"},
        "dkim": dkim_record(domain, domain.dkim_selector, domain.dkim_public_key),
        "return_path": {"type": "CNAME", "name": return_path_name(domain),
                        "value": settings.effective_return_path_domain},
        # A starting point: any DMARC policy passes the check; p=none only reports.
        "dmarc": {"type": "TXT", "name": f"_dmarc.{domain.name}", "value": "v=DMARC1; p=none"},
    }
    for key in domain.other_dkim_keys:
        if key.state == "pending":
            records["dkim_next"] = dkim_record(domain, key.selector, key.public_key)
    if domain.tracking_host:
        records["tracking"] = {"type": "CNAME", "name": tracking_name(domain),
                               "value": settings.effective_tracking_domain}
    return records


def normalize_host(value: str, field: str) -> str:
    """One DNS label (the part left of the domain): ``rp``, ``bounces``, ``track``."""
    label = (value or "").strip().rstrip(".").lower()
    if not (0 < len(label) <= 63 and all(c.isalnum() or c == "-" for c in label)
            and not label.startswith("-") and not label.endswith("-") and label.isascii()):
        raise errors.ValidationError(
            f"{field}: {value!r} must be one DNS label (letters, digits, hyphens; at most 63), "
            f"the part before the domain name", field=field)
    return label


def update_hosts(domain: Domain, *, return_path_host: str | None = None,
                 tracking_host: str | None = None, clear_tracking: bool = False) -> Domain:
    """Change the return-path or tracking host; a changed host must be verified again."""
    if return_path_host is not None:
        host = normalize_host(return_path_host, "return_path_host")
        if host == domain.tracking_host and not clear_tracking and tracking_host is None:
            raise errors.ValidationError("return_path_host: must differ from tracking_host",
                                         field="return_path_host")
        if host != domain.return_path_host:
            domain.return_path_host = host
            domain.return_path_verified_at = None
    if clear_tracking:
        domain.tracking_host = domain.tracking_verified_at = None
    elif tracking_host is not None:
        host = normalize_host(tracking_host, "tracking_host")
        if host == domain.return_path_host:
            raise errors.ValidationError("tracking_host: must differ from return_path_host",
                                         field="tracking_host")
        if host != domain.tracking_host:
            domain.tracking_host = host
            domain.tracking_verified_at = None
    return domain


def verified_return_path_column():
    """SQL: ``<return_path_host>.<name>`` of a domain whose return-path CNAME is verified,
    else NULL (read with the delivery worker's claim)."""
    from sqlalchemy import case

    return case((Domain.return_path_verified_at.is_not(None),
                 Domain.return_path_host + "." + Domain.name), else_=None)


def envelope_sender(token: str, return_path_domain: str | None) -> str:
    """The envelope sender (MAIL FROM) of an outgoing message: ``<token>@<host>.<domain>``
    once the domain's return-path CNAME is verified (SPF then aligns with the From domain),
    else ``<token>@RETURN_PATH_DOMAIN``. Bounces to either are matched by the token."""
    return f"{token}@{return_path_domain or get_settings().effective_return_path_domain}"


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
