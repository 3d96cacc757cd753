"""Custom return path and tracking domain (issue 15, item 3), end to end: the envelope sender
follows the return-path CNAME's verification (through a loopback DNS server), bounces to the
domain's own return path are matched by the SMTP gateway, and tracking links of a domain with
a verified tracking host use it and are served whatever the Host header."""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import requests

from tests.dns_helpers import check, domain_record, fq, publish
from tests.support.smtp import plain_client
from tests.support.inbound import dsn
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support.tracking import html_and_text, tracking_urls
from tests.support import Api, make_tenant, wait_for

SERVER = "/api/v2/server"


def _deliver(api, tenant, mx, **fields):
    to = rcpt("rp")
    result = sent_ok(api, tenant, to=[to], **fields)
    [received] = wait_for(lambda: mx.received_for(to), 20, message=f"mail to {to}")
    recipient = result["recipients"][0]
    wait_status(api, tenant, recipient["id"], "Sent")
    return recipient, received


def test_envelope_sender_follows_the_verified_cname_and_bounces_match(
        api, stack, mx, dns_zone, monkeypatch):
    monkeypatch.setenv("DOMAIN_VERIFY_DNS", "true")
    tenant = make_tenant(api, verified=False)
    records = domain_record(api, tenant)["dns_records"]
    assert records["return_path"] == {"type": "CNAME", "name": f"rp.{tenant.domain}",
                                      "value": "rp.mx.service.test"}
    publish(dns_zone, records, "verification")
    domain = Api.data(api.post(tenant.server_path + f"/domains/{tenant.domain}/verify"))["domain"]
    assert domain["verified"] is True and domain["return_path"]["verified"] is False

    # Not verified: the installation's return path
    recipient, received = _deliver(api, tenant, mx)
    assert received.mail_from == f"{recipient['token']}@rp.mx.service.test"

    # The tenant publishes the CNAME; the check finds it: SPF now aligns with the From domain
    publish(dns_zone, records, "return_path")
    assert check(api, tenant)["records"]
    assert domain_record(api, tenant)["return_path"]["verified"] is True
    recipient, received = _deliver(api, tenant, mx)
    assert received.mail_from == f"{recipient['token']}@rp.{tenant.domain}"

    # A DSN to that address reaches the gateway (its MX is ours through the CNAME): matched
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], dsn(received.mail_from, recipient["rcpt_to"]))
    [bounce] = Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]
    assert bounce["original_message_id"] == recipient["id"] and bounce["bounce_type"] == "hard"
    assert wait_status(api, tenant, recipient["id"], "Bounced")
    with plain_client(stack.smtp_port) as client:  # an unknown token there: refused at RCPT
        client.mail("")
        assert client.rcpt(f"no-such-token@rp.{tenant.domain}")[0] == 550


def test_changing_the_host_needs_a_new_verification(api, tenant, mx):
    path = tenant.server_path + f"/domains/{tenant.domain}"
    assert domain_record(api, tenant)["return_path"]["verified"] is True  # verify, DNS off
    err = Api.error(api.patch(path, {"return_path_host": "a.b"}), 422, "ValidationError")
    assert err["field"] == "return_path_host"
    domain = Api.data(api.patch(path, {"return_path_host": "Bounces"}))["domain"]
    assert domain["return_path"] == {"host": "bounces", "name": f"bounces.{tenant.domain}",
                                     "verified": False, "verified_at": None}
    assert domain["dns_records"]["return_path"]["name"] == f"bounces.{tenant.domain}"
    recipient, received = _deliver(api, tenant, mx)
    assert received.mail_from == f"{recipient['token']}@rp.mx.service.test"

    Api.data(api.post(path + "/verify"))  # DOMAIN_VERIFY_DNS off: verify marks it, as today
    recipient, received = _deliver(api, tenant, mx)
    assert received.mail_from == f"{recipient['token']}@bounces.{tenant.domain}"


@pytest.fixture
def public_url(stack, monkeypatch):
    monkeypatch.setenv("PUBLIC_URL", stack.base_url)
    monkeypatch.setenv("TRACKING_DOMAIN", "track.mx.service.test")
    return stack.base_url


def test_tracking_links_use_the_verified_tracking_host(api, tenant, mx, public_url):
    path = tenant.server_path + f"/domains/{tenant.domain}"
    err = Api.error(api.patch(path, {"tracking_host": "rp"}), 422, "ValidationError")
    assert err["field"] == "tracking_host"  # the return path's name is taken
    domain = Api.data(api.patch(path, {"tracking_host": "links"}))["domain"]
    host = f"links.{tenant.domain}"
    assert domain["tracking"] == {"host": "links", "name": host, "verified": False,
                                  "verified_at": None}
    assert domain["dns_records"]["tracking"] == {"type": "CNAME", "name": host,
                                                 "value": "track.mx.service.test"}
    html = '<p><a href="https://example.org/welcome">hi</a></p>'

    # Not verified yet: links still point at PUBLIC_URL
    _, received = _deliver(api, tenant, mx, html_body=html)
    clicks, pixels = tracking_urls(html_and_text(received.data)[0])
    assert clicks[0].startswith(public_url + "/t/c/") and pixels[0].startswith(public_url)

    Api.data(api.post(path + "/verify"))
    assert domain_record(api, tenant)["tracking"]["verified"] is True
    _, received = _deliver(api, tenant, mx, html_body=html)
    clicks, pixels = tracking_urls(html_and_text(received.data)[0])
    port = urlsplit(public_url).port
    assert clicks[0].startswith(f"http://{host}:{port}/t/c/")
    assert pixels[0].startswith(f"http://{host}:{port}/t/o/")

    # The CNAME leads to the installation's tracking host, which serves any Host header
    url = urlsplit(clicks[0])
    answer = requests.get(f"{public_url}{url.path}", headers={"Host": f"{host}:{port}"},
                          allow_redirects=False, timeout=10)
    assert answer.status_code == 302 and answer.headers["Location"] == \
        "https://example.org/welcome"

    # null removes it: links go back to PUBLIC_URL
    assert Api.data(api.patch(path, {"tracking_host": None}))["domain"]["tracking"] is None
    _, received = _deliver(api, tenant, mx, html_body=html)
    clicks, _ = tracking_urls(html_and_text(received.data)[0])
    assert clicks[0].startswith(public_url + "/t/c/")


def test_tracking_cname_found_by_the_check(api, stack, dns_zone, monkeypatch):
    monkeypatch.setenv("TRACKING_DOMAIN", "track.mx.service.test")
    tenant = make_tenant(api, verified=False)
    path = tenant.server_path + f"/domains/{tenant.domain}"
    records = Api.data(api.patch(path, {"tracking_host": "t"}))["domain"]["dns_records"]
    dns_zone.zone[(fq(f"t.{tenant.domain}"), "CNAME")] = ["elsewhere.example."]
    tracking = [r for r in check(api, tenant)["records"] if r["kind"] == "tracking"][0]
    assert tracking["status"] == "mismatch" and tracking["expected"] == "track.mx.service.test"
    publish(dns_zone, records, "tracking")
    assert [r for r in check(api, tenant)["records"] if r["kind"] == "tracking"][0][
        "status"] == "ok"
    assert domain_record(api, tenant)["tracking"]["verified"] is True
