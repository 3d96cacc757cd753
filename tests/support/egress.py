"""Helpers for egress tests: an address at the loopback MX's domain (the ``mx_zone`` fixture of
tests/conftest.py), IP pools and their assignment."""
from __future__ import annotations

from tests.support import Api, unique


def to(server, name="r") -> str:
    return f"{unique(name)}@{server.domain}"


def pool(api, *addresses, relay_host=None, default=False) -> dict:
    body = {"name": unique("pool"), "default": default}
    if relay_host:
        body["relay_host"] = relay_host
    created = Api.data(api.post(f"{ADMIN}/ip_pools", body), 201)["ip_pool"]
    for address in addresses:
        Api.data(api.post(f"{ADMIN}/ip_pools/{created['id']}/ip_addresses", address), 201)
    return created


def assign(api, tenant, pool_id) -> None:
    Api.data(api.post(tenant.server_path + "/ip_pool", {"ip_pool_id": pool_id}))


ADMIN = "/api/v2/admin"
