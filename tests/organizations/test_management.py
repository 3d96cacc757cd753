"""The management core through real HTTP: organizations, servers, domains, credentials,
IP pools, admin keys, and the messaging surface's server endpoints."""
from __future__ import annotations

import base64

import pytest

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support import Api, unique

ADMIN = "/api/v2/admin"


def test_tenant_setup_end_to_end_and_dkim_record_carries_a_2048_bit_key(api):
    org = Api.data(api.post(f"{ADMIN}/organizations", {"name": "Acme Mail"}), 201)["organization"]
    assert org["permalink"].startswith("acme-mail")
    server = Api.data(api.post(f"{ADMIN}/organizations/{org['permalink']}/servers",
                               {"name": "Production", "mode": "Live"}), 201)["server"]
    base = f"{ADMIN}/organizations/{org['permalink']}/servers/{server['permalink']}"
    domain = Api.data(api.post(base + "/domains", {"name": "Mail.Example.org"}), 201)["domain"]
    assert domain["name"] == "mail.example.org" and domain["verified"] is False

    records = domain["dns_records"]
    assert set(records) == {"verification", "spf", "dkim", "return_path", "dmarc",
                            "dmarc_report_authorization"}
    assert all(r["type"] == "TXT" for k, r in records.items() if k != "return_path")
    assert records["return_path"] == {"type": "CNAME", "name": "rp.mail.example.org",
                                      "value": "rp.mx.service.test"}
    assert records["spf"]["value"].startswith("v=spf1 ") and "include:" in records["spf"]["value"]
    assert records["dkim"]["name"] == f"{domain['dkim_selector']}._domainkey.mail.example.org"
    tags = dict(part.strip().split("=", 1) for part in records["dkim"]["value"].split(";"))
    assert tags["v"] == "DKIM1" and tags["k"] == "rsa"
    public_key = serialization.load_der_public_key(base64.b64decode(tags["p"]))
    assert isinstance(public_key, rsa.RSAPublicKey) and public_key.key_size == 2048

    verified = Api.data(api.post(base + "/domains/mail.example.org/verify"))["domain"]
    assert verified["verified"] is True and verified["verified_at"]

    cred = Api.data(api.post(base + "/credentials", {"type": "API", "name": "app"}), 201)["credential"]
    assert cred["key"] and cred["type"] == "API"
    listed = Api.data(api.get(base + "/credentials"))["credentials"]
    assert listed[0]["id"] == cred["id"] and "key" not in listed[0]  # shown once only

    me = Api.data(api.get("/api/v2/server", server_key=cred["key"]))["server"]
    assert me["permalink"] == server["permalink"] and me["organization"] == org["permalink"]
    assert Api.data(api.get("/api/v2/server/ping", server_key=cred["key"]))["pong"] is True


def test_credentials_hold_and_smtp_ip(api, tenant):
    base = tenant.server_path
    cred = Api.data(api.post(base + "/credentials", {"type": "API", "name": "x"}), 201)["credential"]
    held = Api.data(api.patch(base + f"/credentials/{cred['id']}", {"hold": True, "name": "y"}))
    assert held["credential"]["hold"] is True and held["credential"]["name"] == "y"
    Api.error(api.get("/api/v2/server/ping", server_key=cred["key"]), 401, "Unauthorized")
    ip = Api.data(api.post(base + "/credentials", {"type": "SMTP-IP", "name": "office",
                                                   "ip_range": "192.0.2.0/24"}), 201)
    assert ip["credential"]["ip_range"] == "192.0.2.0/24" and "key" not in ip["credential"]
    Api.error(api.post(base + "/credentials", {"type": "SMTP-IP", "name": "o", "ip_range": "nope"}),
              422, "ValidationError")
    Api.error(api.post(base + "/credentials", {"type": "POP3", "name": "o"}), 422, "ValidationError")
    Api.data(api.delete(base + f"/credentials/{cred['id']}"))
    Api.error(api.get(base + f"/credentials/{cred['id']}"), 404, "NotFound")


def test_server_suspend_unsuspend_update_and_ip_pool(api, tenant):
    base = tenant.server_path
    suspended = Api.data(api.post(base + "/suspend", {"reason": "abuse report"}))["server"]
    assert suspended["suspended"] is True and suspended["suspension_reason"] == "abuse report"
    assert Api.data(api.post(base + "/unsuspend"))["server"]["suspended"] is False
    updated = Api.data(api.patch(base, {"name": "Renamed", "track_opens": False}))["server"]
    assert updated["name"] == "Renamed" and updated["track_opens"] is False

    pool = Api.data(api.post(f"{ADMIN}/ip_pools", {"name": unique("pool")}), 201)["ip_pool"]
    addr = Api.data(api.post(f"{ADMIN}/ip_pools/{pool['id']}/ip_addresses",
                             {"ipv4": "192.0.2.10", "hostname": "o1.mx.test"}), 201)["ip_address"]
    assert Api.data(api.get(f"{ADMIN}/ip_pools/{pool['id']}"))["ip_pool"]["ip_addresses"][0]["id"] == addr["id"]
    Api.error(api.post(f"{ADMIN}/ip_pools/{pool['id']}/ip_addresses",
                       {"ipv4": "2001:db8::1", "hostname": "x"}), 422, "ValidationError")
    assigned = Api.data(api.post(base + "/ip_pool", {"ip_pool_id": pool["id"]}))["server"]
    assert assigned["ip_pool_id"] == pool["id"]
    Api.error(api.post(base + "/ip_pool", {"ip_pool_id": 999999}), 422, "ValidationError")
    Api.data(api.delete(f"{ADMIN}/ip_pools/{pool['id']}/ip_addresses/{addr['id']}"))
    Api.data(api.delete(f"{ADMIN}/ip_pools/{pool['id']}"))
    Api.error(api.get(f"{ADMIN}/ip_pools/{pool['id']}"), 404, "NotFound")


def test_admin_api_keys_shown_once_and_revocable(api):
    created = Api.data(api.post(f"{ADMIN}/admin_api_keys", {"name": "ci"}), 201)["admin_api_key"]
    secret = created["key"]
    assert Api.data(api.get(f"{ADMIN}/organizations", admin_key=secret))
    listed = Api.data(api.get(f"{ADMIN}/admin_api_keys?per_page=100"))["admin_api_keys"]
    assert any(k["id"] == created["id"] and "key" not in k for k in listed)
    Api.data(api.delete(f"{ADMIN}/admin_api_keys/{created['id']}"))
    Api.error(api.get(f"{ADMIN}/organizations", admin_key=secret), 401, "Unauthorized")
    Api.error(api.delete(f"{ADMIN}/admin_api_keys/{created['id']}"), 404, "NotFound")


def test_lists_paginate(api):
    org = Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("Pag")}), 201)["organization"]
    for i in range(3):
        api.post(f"{ADMIN}/organizations/{org['permalink']}/servers", {"name": f"s{i}"})
    page = Api.data(api.get(f"{ADMIN}/organizations/{org['permalink']}/servers?per_page=2&page=2"))
    assert [s["name"] for s in page["servers"]] == ["s2"]
    assert page["pagination"] == {"page": 2, "per_page": 2, "total": 3, "total_pages": 2}
    Api.error(api.get(f"{ADMIN}/organizations?per_page=101"), 422, "ValidationError")
    Api.error(api.get(f"{ADMIN}/organizations?page=0"), 422, "ValidationError")


def test_permalinks_unique_and_deleting_an_organization(api):
    name = unique("Dup")
    first = Api.data(api.post(f"{ADMIN}/organizations", {"name": name}), 201)["organization"]
    second = Api.data(api.post(f"{ADMIN}/organizations", {"name": name}), 201)["organization"]
    assert first["permalink"] != second["permalink"]
    err = Api.error(api.post(f"{ADMIN}/organizations", {"name": "x", "permalink": first["permalink"]}),
                    422, "ValidationError")
    assert err["field"] == "permalink"
    Api.data(api.delete(f"{ADMIN}/organizations/{second['permalink']}"))
    Api.error(api.get(f"{ADMIN}/organizations/{second['permalink']}"), 404, "NotFound")


def test_duplicate_and_invalid_domains(api, tenant):
    base = tenant.server_path
    Api.error(api.post(base + "/domains", {"name": tenant.domain}), 422, "ValidationError")
    for bad in ("no-dot", "bad_domain.com", "-x.com", "a" * 64 + ".com"):
        Api.error(api.post(base + "/domains", {"name": bad}), 422, "ValidationError")
    idn = Api.data(api.post(base + "/domains", {"name": "bücher.example"}), 201)["domain"]
    assert idn["name"] == "xn--bcher-kva.example"
    Api.data(api.delete(base + "/domains/bücher.example"))
    Api.error(api.get(base + "/domains/xn--bcher-kva.example"), 404, "NotFound")


@pytest.mark.parametrize("name,under", [
    ("beta.test", "test"), ("Mail.LOCALHOST", "localhost"), ("shop.local", "local"),
    ("x.invalid", "invalid"), ("abc.onion", "onion"), ("router.home.arpa", "arpa"),
    ("corp.internal", "internal"), ("svc.alt", "alt")])
def test_reserved_and_special_use_domains_are_refused_with_the_reason(api, tenant, name, under):
    err = Api.error(api.post(tenant.server_path + "/domains", {"name": name}), 422,
                    "ValidationError")
    assert err["field"] == "name" and f"under {under}" in err["message"], err
    assert "RFC" in err["message"] or "ICANN" in err["message"], err


def test_documentation_domains_only_with_the_explicit_allowance(api, tenant, monkeypatch):
    monkeypatch.setenv("RESERVED_DOMAINS_ALLOWED", "example.net")
    err = Api.error(api.post(tenant.server_path + "/domains", {"name": "mail.example.com"}),
                    422, "ValidationError")
    assert "example.com" in err["message"] and "RFC 2606" in err["message"]
    Api.data(api.post(tenant.server_path + "/domains", {"name": "mail.example.net"}), 201)


def test_the_allowance_cannot_name_undeliverable_reserved_names():
    from chalicelib.config import ConfigError, load_settings

    with pytest.raises(ConfigError, match="RESERVED_DOMAINS_ALLOWED: test cannot be allowed"):
        load_settings({"RESERVED_DOMAINS_ALLOWED": "example.com,test"})
