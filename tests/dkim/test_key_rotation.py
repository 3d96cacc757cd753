"""Key rotation (issue 15, item 4): a domain's DKIM key (rotate -> pending, activate once
its record is in DNS, the old one retiring for DKIM_RETIRING_DAYS), with received mail
verified by dkimpy against the keys published in a DNS server on loopback; and the
installation key that signs webhooks, with both public keys usable during the overlap."""
from __future__ import annotations

import base64
import io
import json
import os
import sys
from contextlib import redirect_stdout
from datetime import timedelta

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from sqlalchemy import delete, func, select

from chalicelib import clock, deploy_tasks
from chalicelib.db.models import DkimKey, InstallationKey
from chalicelib.services.security import installation_keys, signing
from chalicelib.services.messages import retention
from tests.dns_helpers import check, domain_record, publish
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support.webhooks import create_webhook, emit, make_message
from tests.receivers import Receiver
from tests.support import Api, all_tenants, make_tenant, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "client"))
from email_service_client import verify_webhook_signature  # noqa: E402


def dkim_verifies(data: bytes, zone) -> bool:
    """dkimpy's verification, its key lookups answered by the loopback DNS server."""
    resolver = zone.resolver()

    def dnsfunc(name, timeout=5):
        name = name.decode() if isinstance(name, bytes) else name
        try:
            answer = resolver.resolve(name, "TXT")
        except Exception:  # noqa: BLE001  (NXDOMAIN, no answer: no key)
            return None
        return b"".join(answer[0].strings)

    return bool(dkim.verify(data, dnsfunc=dnsfunc))


def selector_of(data: bytes) -> str:
    header = data.split(b"\r\n\r\n", 1)[0].decode()
    unfolded = header.replace("\r\n\t", " ").replace("\r\n ", " ")
    line = next(x for x in unfolded.split("\r\n") if x.lower().startswith("dkim-signature:"))
    return dict(p.strip().split("=", 1) for p in line.split(":", 1)[1].split(";")
                if "=" in p)["s"]


def deliver(api, tenant, mx) -> bytes:
    to = rcpt("dkim")
    result = sent_ok(api, tenant, to=[to])
    [received] = wait_for(lambda: mx.received_for(to), 20, message=f"mail to {to}")
    wait_status(api, tenant, result["recipients"][0]["id"], "Sent")
    return received.data


def states(domain: dict) -> dict:
    return {k["selector"]: k["state"] for k in domain["dkim_keys"]}


def test_dkim_rotation_activation_and_retirement(api, stack, mx, dns_zone, monkeypatch):
    monkeypatch.setenv("DOMAIN_VERIFY_DNS", "true")
    tenant = make_tenant(api, verified=False)
    path = tenant.server_path + f"/domains/{tenant.domain}"
    publish(dns_zone, domain_record(api, tenant)["dns_records"])
    verified = Api.data(api.post(path + "/verify"))["domain"]
    assert verified["return_path"]["verified"] is True  # DNS checks on: its CNAME was found
    old = domain_record(api, tenant)["dkim_selector"]
    Api.error(api.post(path + "/dkim/activate"), 422, "ValidationError")  # nothing pending

    before = deliver(api, tenant, mx)
    assert selector_of(before) == old and dkim_verifies(before, dns_zone)

    # Rotate: a new key under a new selector, listed beside the current one; still signing
    # with the old one. Rotating again replaces the never-activated key.
    first = Api.data(api.post(path + "/dkim/rotate"))["domain"]
    domain = Api.data(api.post(path + "/dkim/rotate"))["domain"]
    new = next(s for s, state in states(domain).items() if state == "pending")
    replaced = next(s for s, state in states(first).items() if state == "pending")
    assert states(domain) == {old: "active", new: "pending"} and new != replaced
    assert domain["dkim_selector"] == old
    assert domain["dns_records"]["dkim_next"]["name"] == f"{new}._domainkey.{tenant.domain}"
    key = domain["dns_records"]["dkim_next"]["value"]
    assert key.startswith("v=DKIM1; k=rsa; p=")
    public = serialization.load_der_public_key(base64.b64decode(key.split("p=", 1)[1]))
    assert public.key_size == 2048
    assert selector_of(deliver(api, tenant, mx)) == old

    # With DNS checks on, activation waits for the new record
    err = Api.error(api.post(path + "/dkim/activate"), 422, "ValidationError")
    assert err["field"] == "dkim" and f"{new}._domainkey.{tenant.domain}" in err["message"]
    publish(dns_zone, domain["dns_records"], "dkim_next")
    domain = Api.data(api.post(path + "/dkim/activate"))["domain"]
    assert domain["dkim_selector"] == new
    assert states(domain) == {new: "active", old: "retiring"}
    retiring = next(k for k in domain["dkim_keys"] if k["state"] == "retiring")
    assert retiring["retire_at"] and retiring["record"]["name"] == f"{old}._domainkey.{tenant.domain}"

    after = deliver(api, tenant, mx)
    assert selector_of(after) == new and dkim_verifies(after, dns_zone)
    assert dkim_verifies(before, dns_zone)  # mail signed before still verifies meanwhile
    dkim_checks = {r["selector"]: r for r in check(api, tenant)["records"] if r["kind"] == "dkim"}
    assert {s: r["status"] for s, r in dkim_checks.items()} == {new: "ok", old: "ok"}
    assert dkim_checks[old]["state"] == "retiring"

    # After DKIM_RETIRING_DAYS (7) the old key is no longer listed nor checked, then pruned
    clock.advance(timedelta(days=7, hours=1))
    domain = domain_record(api, tenant)
    assert states(domain) == {new: "active"}
    assert [r["selector"] for r in check(api, tenant)["records"] if r["kind"] == "dkim"] == [new]
    with all_tenants() as db:
        assert retention.prune(db)["dkim_keys"] >= 1
    with all_tenants() as db:
        assert db.scalar(select(func.count()).select_from(DkimKey)
                         .where(DkimKey.selector == old)) == 0


def test_without_dns_checks_activation_does_not_wait(api, tenant, mx):
    path = tenant.server_path + f"/domains/{tenant.domain}"
    old = domain_record(api, tenant)["dkim_selector"]
    Api.data(api.post(path + "/dkim/rotate"))
    domain = Api.data(api.post(path + "/dkim/activate"))["domain"]
    assert domain["dkim_selector"] != old and states(domain)[old] == "retiring"
    data = deliver(api, tenant, mx)
    assert selector_of(data) == domain["dkim_selector"]
    records = {r["record"]["name"]: r["record"]["value"] for r in domain["dkim_keys"]}

    def dnsfunc(name, timeout=5):
        name = name.decode() if isinstance(name, bytes) else name
        value = records.get(name.rstrip("."))
        return value.encode() if value else None

    assert dkim.verify(data, dnsfunc=dnsfunc)


@pytest.fixture
def fresh_installation_keys():
    def reset():
        with all_tenants() as db:
            db.execute(delete(InstallationKey))
        installation_keys.clear_cache()
    reset()
    yield
    reset()  # later tests verify with the SIGNING_KEY_PATH key


def _public(entry: dict):
    return serialization.load_pem_public_key(entry["public_key_pem"].encode())


def _signed_webhook(rx, count: int, tenant):
    emit(make_message(tenant), "MessageSent", "accepted")
    request = rx.wait_for(count)[count - 1]
    return request.body, request.headers["x-service-signature"], \
        request.headers["x-service-signature-key"]


def test_installation_key_rotation_with_both_keys_published(api, tenant,
                                                            fresh_installation_keys):
    out = io.StringIO()
    with redirect_stdout(out):
        assert deploy_tasks.main(["signing-key", "show"]) == 0
    [current] = json.loads(out.getvalue())["keys"]
    assert current["key_id"] == "installation" and current["state"] == "active"
    assert current["dns_record"]["name"] == "installation._domainkey.mx.service.test"
    assert deploy_tasks.main(["signing-key", "activate"]) == 1  # nothing pending

    with Receiver([200]) as rx:
        create_webhook(api, tenant, rx.url)
        body, signature, key_id = _signed_webhook(rx, 1, tenant)
        old_body, old_signature = body, signature
        assert key_id == "installation"
        assert signing.verify_body(_public(current), body, signature)

        pending = deploy_tasks.signing_key("rotate")["keys"]
        assert [k["state"] for k in pending] == ["active", "pending"]
        new = pending[1]
        assert new["dns_record"]["name"] == f"{new['key_id']}._domainkey.mx.service.test"
        assert _public(new).key_size == 2048
        body, signature, key_id = _signed_webhook(rx, 2, tenant)
        assert key_id == "installation"  # pending keys sign nothing

        listed = deploy_tasks.signing_key("activate")["keys"]
        assert {k["key_id"]: k["state"] for k in listed} == {"installation": "retiring",
                                                            new["key_id"]: "active"}
        # Both public keys published during the overlap
        assert all(k["dns_record"]["value"].startswith("v=DKIM1; k=rsa; p=") for k in listed)
        body, signature, key_id = _signed_webhook(rx, 3, tenant)
        assert key_id == new["key_id"]
        assert signing.verify_body(_public(new), body, signature)
        assert not signing.verify_body(_public(current), body, signature)
        # A receiver holding both published keys accepts either during the overlap
        both = [k["public_key_pem"] for k in listed]
        assert verify_webhook_signature(body, signature, both)
        assert verify_webhook_signature(old_body, old_signature, both)
        assert not verify_webhook_signature(body + b" ", signature, both)

    # The same through the migrate Lambda function's event (how operators run it on AWS)
    from app import migrate

    assert [k["state"] for k in migrate({"signing_key": "show"}, None)["keys"]] == \
        ["active", "retiring"]
    clock.advance(timedelta(days=7, hours=1))
    assert [k["key_id"] for k in deploy_tasks.signing_key("show")["keys"]] == [new["key_id"]]
    with all_tenants() as db:
        assert retention.prune(db)["installation_keys"] == 1
