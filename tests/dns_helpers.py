"""A DNS server on loopback that the whole running stack asks (DNS_RESOLVERS), and helpers
to publish a domain's records in it as a tenant would."""
from __future__ import annotations

import pytest

from tests.dns_server import LoopbackDNS
from tests.support import Api


@pytest.fixture
def dns_zone(stack, monkeypatch):
    """An empty zone served on loopback; every lookup of the stack goes there."""
    with LoopbackDNS({}) as server:
        monkeypatch.setenv("DNS_RESOLVERS", f"127.0.0.1:{server.port}")
        monkeypatch.setenv("DNS_TIMEOUT_SECONDS", "2")
        yield server


def fq(name: str) -> str:
    return name.rstrip(".") + "."


def txt(value: str) -> str:
    """A TXT value in zone-file form, split into 255-octet strings as DNS requires."""
    chunks = [value[i:i + 255] for i in range(0, len(value), 255)] or [""]
    return " ".join(f'"{c}"' for c in chunks)


def domain_record(api: Api, tenant, name: str | None = None) -> dict:
    return Api.data(api.get(tenant.server_path + f"/domains/{name or tenant.domain}"))["domain"]


def publish(zone: LoopbackDNS, records: dict, *only: str) -> None:
    """Publish the domain's ``dns_records`` (all, or the purposes named) in ``zone``."""
    for purpose, record in records.items():
        if only and purpose not in only:
            continue
        key = (fq(record["name"]), record["type"])
        value = fq(record["value"]) if record["type"] == "CNAME" else txt(record["value"])
        values = zone.zone.setdefault(key, [])
        if record["type"] == "CNAME":
            values[:] = [value]
        elif value not in values:
            values.append(value)


def publish_return_path_spf(zone: LoopbackDNS, value: str | None = None) -> str:
    """The operator's SPF record at RETURN_PATH_DOMAIN (by default the one the service asks
    for); returns its name."""
    from chalicelib.services.domains.records import return_path_spf

    record = return_path_spf()
    zone.zone[(fq(record["name"]), "TXT")] = [txt(value or record["value"])]
    return record["name"]


def check(api: Api, tenant, name: str | None = None) -> dict:
    return Api.data(api.get(tenant.server_path +
                            f"/domains/{name or tenant.domain}/check"))["check"]


def by_kind(result: dict) -> dict:
    found: dict = {}
    for record in result["records"]:
        found.setdefault(record["kind"], []).append(record)
    return {k: v[0] if len(v) == 1 else v for k, v in found.items()}
