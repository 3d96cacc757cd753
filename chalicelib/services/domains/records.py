"""The DNS records a sending domain should publish: verification, SPF and DKIM TXT records, a
DMARC record (asking for aggregate reports at the domain's report address) with the
authorization record that address needs in the installation's zone, the return-path CNAME (``<return_path_host>.<name>`` -> RETURN_PATH_DOMAIN),
the next DKIM key while one is pending and, when set, the tracking CNAME. Also the one record
of the installation's own zone that every domain's return path relies on: the SPF record at
RETURN_PATH_DOMAIN (``return_path_spf``), which the operator publishes."""
from __future__ import annotations

from chalicelib.config import get_settings
from chalicelib.db.models import Domain
from chalicelib.services.dkim import keys as dkim_keys
from chalicelib.services.dmarc import addresses as dmarc_addresses
from chalicelib.services.domains import names


def dns_records(domain: Domain) -> dict:
    settings = get_settings()
    records = {
        "verification": {"type": "TXT", "name": domain.name,
                         "value": f"email-service-verification={domain.verification_token}"},
        "spf": {"type": "TXT", "name": domain.name,
                "value": f"v=spf1 a mx include:{settings.effective_spf_include} ~all"},
        "dkim": dkim_keys.record(domain.name, domain.dkim_selector, domain.dkim_public_key),
        "return_path": {"type": "CNAME", "name": names.return_path_name(domain),
                        "value": settings.effective_return_path_domain},
        # A starting point: any DMARC policy passes the check; p=none only reports, and
        # the aggregate reports come to us (services/dmarc/).
        "dmarc": {"type": "TXT", "name": f"_dmarc.{domain.name}",
                  "value": dmarc_addresses.dmarc_record_value(domain)},
    }
    authorization = dmarc_addresses.authorization_record(domain)
    if authorization is not None:  # in the installation's zone: the operator publishes it
        records["dmarc_report_authorization"] = authorization
    for key in domain.other_dkim_keys:
        if key.state == dkim_keys.PENDING:
            records["dkim_next"] = dkim_keys.record(domain.name, key.selector, key.public_key)
    if domain.tracking_host:
        records["tracking"] = {"type": "CNAME", "name": names.tracking_name(domain),
                               "value": settings.effective_tracking_domain}
    return records


def return_path_spf(settings=None) -> dict:
    """The SPF record the operator publishes at RETURN_PATH_DOMAIN (``rp.<SMTP_HOSTNAME>``):
    every envelope sender is ``<token>@RETURN_PATH_DOMAIN`` or ``<token>@<rp host>.<domain>``,
    a CNAME to it, so receivers evaluate SPF against this record (through the CNAME). It
    authorises what SPF_INCLUDE lists: the installation's sending addresses."""
    settings = settings or get_settings()
    return {"type": "TXT", "name": settings.effective_return_path_domain,
            "value": f"v=spf1 include:{settings.effective_spf_include} ~all"}
