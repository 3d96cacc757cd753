"""Where a domain's aggregate reports go: ``<local>+<token>@<report domain>``, from
DMARC_REPORT_ADDRESS (default ``dmarc@<RETURN_PATH_DOMAIN>``), the token being the domain's
uuid without hyphens (hex: it survives an MTA that lower-cases local parts). A token rather
than the domain's name: the same name may be a sending domain of several servers, and the
address must name exactly one.

The report domain is usually not the tenant's domain, so receivers first look for the
external-destination authorization record (RFC 7489 section 7.1)
``<tenant domain>._report._dmarc.<report domain> TXT "v=DMARC1"``; it lives in the
installation's zone, and one wildcard ``*._report._dmarc.<report domain>`` covers every
tenant (docs/operating.md).
"""
from __future__ import annotations

import re
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib.config import get_settings
from chalicelib.db.models import Domain

_TOKEN = re.compile(r"^[0-9a-f]{32}$")


def _base() -> tuple[str, str]:
    local, _, domain = get_settings().effective_dmarc_report_address.rpartition("@")
    return local, domain.rstrip(".")


def report_address(domain: Domain) -> str:
    local, report_domain = _base()
    return f"{local}+{domain.uuid.replace('-', '')}@{report_domain}"


def authorization_record(domain: Domain) -> dict | None:
    """The TXT record that lets receivers send ``domain``'s reports to another domain; None
    when the report address is inside the domain itself."""
    report_domain = _base()[1]
    if report_domain == domain.name or report_domain.endswith("." + domain.name):
        return None
    return {"type": "TXT", "name": f"{domain.name}._report._dmarc.{report_domain}",
            "value": "v=DMARC1"}


def dmarc_record_value(domain: Domain) -> str:
    """The DMARC record we suggest: report only (p=none), aggregate reports to us."""
    return f"v=DMARC1; p=none; rua=mailto:{report_address(domain)}"


def token_of(address: str) -> str | None:
    """The token of ``address`` when it is a report address of this installation (any
    token, known or not); None for every other address."""
    local, _, domain = address.strip().lower().rpartition("@")
    base_local, base_domain = _base()
    name, plus, token = local.partition("+")
    if domain.rstrip(".") != base_domain or name != base_local or not plus:
        return None
    return token


def find_domain(db: Session, token: str) -> Domain | None:
    """The domain a report address's token names."""
    if not _TOKEN.match(token):
        return None
    return db.scalar(select(Domain).where(Domain.uuid == str(uuid.UUID(hex=token))))
