"""Infrastructure signals (issue 34, item 4), through the running stack: a refusal that
blames the sending IP (a block list named in an SMTP reply during delivery) or the sending
domain (a DMARC refusal in a Postfix DSN) is recorded with the address and pool the mail
left from, the receiver and its words; it shows on the address's, the pool's and the
domain's health, in the lists, in the log and the metric."""
from __future__ import annotations

import pytest

from chalicelib import observability
from tests.support.accounts import make_user
from tests.support.egress import assign, pool, to
from tests.inbound.postfix_dsn import postfix_dsn
from tests.support.sending import sent_ok, wait_status
from tests.support.smtp import plain_client
from tests.support import Api

ADMIN = "/api/v2/admin"
BLOCKED = ("550 5.7.1 Service unavailable; Client host [127.0.0.42] blocked using "
           "zen.spamhaus.org; https://www.spamhaus.org/query/ip/127.0.0.42")
DMARC = ("550 5.7.26 This mail has been blocked because the sender is unauthenticated. "
         "Gmail requires all senders to authenticate with either SPF or DKIM.")


@pytest.fixture
def sending_pool(api, tenant, mx_zone):  # noqa: F811
    created = pool(api, {"ipv4": "127.0.0.42", "hostname": "o2.signals.test"})
    assign(api, tenant, created["id"])
    return created


def shown_pool(api, pool_id):
    return Api.data(api.get(f"{ADMIN}/ip_pools/{pool_id}"))["ip_pool"]


def domain(api, tenant):
    return Api.data(api.get(f"{tenant.server_path}/domains/{tenant.domain}"))["domain"]


def test_a_block_list_refusal_during_delivery(api, tenant, mx_zone, sending_pool,  # noqa: F811
                                              logs):  # noqa: F811
    before = observability.counters()["infrastructure_signals"]
    mx_zone.script = [f"rcpt:{BLOCKED}"]
    address = to(mx_zone)
    [recipient] = sent_ok(api, tenant, to=[address])["recipients"]
    failed = wait_status(api, tenant, recipient["id"], "HardFail")
    assert failed["deliveries"][-1]["source_address"] == "127.0.0.42"

    # The address's, the pool's and the domain's health
    shown = shown_pool(api, sending_pool["id"])
    health = shown["ip_addresses"][0]["signals"]
    assert (health["count"], health["ip"], health["domain"]) == (1, 1, 0)
    [receiver] = health["receivers"]
    assert receiver["receiver"] == f"mx.{mx_zone.domain}:{mx_zone.port}"
    assert receiver["count"] == 1 and receiver["last_at"] == health["last_at"]
    latest = receiver["latest"]
    assert (latest["reason"], latest["blames"], latest["origin"], latest["code"],
            latest["status"]) == ("block_list", "ip", "delivery", 550, "5.7.1")
    assert "zen.spamhaus.org" in latest["text"] and latest["message_id"] == recipient["id"]
    assert latest["source_address"] == "127.0.0.42" and latest["domain"] == tenant.domain
    assert shown["signals"]["count"] == 1
    assert domain(api, tenant)["signals"]["ip"] == 1
    assert health["window_hours"] == 24

    # The lists: the installation's (instance admins), the domain's (its server's roles)
    listed = Api.data(api.get(f"{ADMIN}/infrastructure_signals?source_address=127.0.0.42"
                              f"&ip_pool_id={sending_pool['id']}"))["signals"]
    assert [s["id"] for s in listed] == [latest["id"]]
    assert Api.data(api.get(f"{ADMIN}/infrastructure_signals?source_address=127.0.0.9")
                    )["signals"] == []
    Api.error(api.get(f"{ADMIN}/infrastructure_signals?source_address=nope"), 422,
              "ValidationError")
    viewer = make_user(api)
    Api.data(api.post(f"{ADMIN}/organizations/{tenant.org}/members",
                      {"user_id": viewer.id, "role": "viewer"}), 201)
    Api.error(api.get(f"{ADMIN}/infrastructure_signals", bearer=viewer.token), 403,
              "Forbidden")
    mine = Api.data(api.get(f"{tenant.server_path}/domains/{tenant.domain}/signals?blames=ip",
                            bearer=viewer.token))["signals"]
    assert [s["id"] for s in mine] == [latest["id"]]
    assert Api.data(api.get(f"{tenant.server_path}/domains/{tenant.domain}/signals"
                            "?blames=domain"))["signals"] == []

    # The log line and the metric an operator watches
    line = logs.wait("infrastructure.signal", message_id=recipient["id"])
    assert (line["blames"], line["reason"], line["source_address"], line["ip_pool_id"]) == \
        ("ip", "block_list", "127.0.0.42", sending_pool["id"])
    assert observability.counters()["infrastructure_signals"] - before == 1


def test_a_dmarc_refusal_in_a_bounce(api, stack, tenant, mx_zone, sending_pool):  # noqa: F811
    address = to(mx_zone)
    [recipient] = sent_ok(api, tenant, to=[address])["recipients"]
    wait_status(api, tenant, recipient["id"], "Sent")
    [received] = mx_zone.received_for(address)
    dsn = postfix_dsn(received.mail_from, address, received.data, status="5.7.26",
                      remote="gmail-smtp-in.l.google.com", reply=DMARC)
    with plain_client(stack.smtp_port) as client:
        assert client.sendmail("", [received.mail_from], dsn) == {}
    health = domain(api, tenant)["signals"]
    assert (health["count"], health["domain"], health["ip"]) == (1, 1, 0)
    [receiver] = health["receivers"]
    latest = receiver["latest"]
    assert receiver["receiver"] == "gmail-smtp-in.l.google.com"
    assert (latest["reason"], latest["blames"], latest["origin"], latest["status"],
            latest["code"]) == ("authentication", "domain", "bounce", "5.7.26", 550)
    # It left from the pool's address: the address and the pool show it too
    assert latest["source_address"] == "127.0.0.42"
    assert latest["ip_pool_id"] == sending_pool["id"]
    assert shown_pool(api, sending_pool["id"])["ip_addresses"][0]["signals"]["domain"] == 1
