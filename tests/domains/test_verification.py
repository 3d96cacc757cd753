"""Domain verification against DNS (DOMAIN_VERIFY_DNS=true): POST .../verify succeeds only
once the verification TXT record is published, answered by a real DNS server on loopback."""
from __future__ import annotations

import pytest

from tests.dns_server import LoopbackDNS
from tests.support import Api, unique


@pytest.fixture
def dns_zone(monkeypatch):
    monkeypatch.setenv("DOMAIN_VERIFY_DNS", "true")
    with LoopbackDNS({}) as server:
        monkeypatch.setenv("DNS_RESOLVERS", f"127.0.0.1:{server.port}")
        yield server


def _new_domain(api, tenant) -> tuple[str, dict]:
    name = f"{unique('v')}.example.com"
    created = Api.data(api.post(tenant.server_path + "/domains", {"name": name}), 201)
    return name, created["domain"]


def _records(api, tenant, name) -> dict:
    return Api.data(api.get(tenant.server_path + f"/domains/{name}"))["domain"]["dns_records"]


def test_verify_waits_for_the_published_txt_record(api, tenant, dns_zone):
    name, _ = _new_domain(api, tenant)
    expected = _records(api, tenant, name)["verification"]["value"]
    verify = tenant.server_path + f"/domains/{name}/verify"

    refused = api.post(verify)  # NXDOMAIN: nothing published yet
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "ValidationError" and error["field"] == "name"
    assert expected in error["message"]

    dns_zone.zone[(name + ".", "TXT")] = ['"v=spf1 -all"', '"some-other-service=abc"']
    assert api.post(verify).status_code == 422  # TXT records, but not ours

    dns_zone.zone[(name + ".", "TXT")].append(f'"{expected}"')
    domain = Api.data(api.post(verify))["domain"]
    assert domain["verified"] is True


def test_a_record_split_into_strings_counts_and_an_unanswered_lookup_is_a_clear_422(
        api, tenant, dns_zone, monkeypatch):
    name, _ = _new_domain(api, tenant)
    expected = _records(api, tenant, name)["verification"]["value"]
    half = len(expected) // 2
    dns_zone.zone[(name + ".", "TXT")] = [f'"{expected[:half]}" "{expected[half:]}"']
    assert Api.data(api.post(tenant.server_path + f"/domains/{name}/verify"))["domain"][
        "verified"] is True

    other, _ = _new_domain(api, tenant)
    monkeypatch.setenv("DNS_RESOLVERS", "127.0.0.1:9")  # nobody answers there
    monkeypatch.setenv("DNS_TIMEOUT_SECONDS", "0.3")
    refused = api.post(tenant.server_path + f"/domains/{other}/verify")
    assert refused.status_code == 422 and "try again" in refused.json()["error"]["message"]


def test_without_the_setting_verify_only_marks_the_domain(api, tenant, monkeypatch):
    monkeypatch.setenv("DOMAIN_VERIFY_DNS", "false")
    name, _ = _new_domain(api, tenant)
    assert Api.data(api.post(tenant.server_path + f"/domains/{name}/verify"))["domain"][
        "verified"] is True
