"""The gateway's outbound relay for IP pools (issue 24.1): a worker whose host owns none of a
pool's addresses (IP_POOL_EGRESS=relay, as on Lambda) hands the mail to the pool's relay_host;
the relay binds the pool's address, greets with its name, and answers with the MX's own reply,
which the worker records as the MX's. It relays nothing else."""
from __future__ import annotations

import smtplib

import pytest

from chalicelib.services.delivery import client as smtp_client
from chalicelib.smtp.gateway import Gateway
from chalicelib.smtp.relay import OutboundRelay
from tests.support.egress import assign, pool, to
from tests.support.sending import message, sent_ok, wait_status
from tests.support import free_port, make_tenant


@pytest.fixture
def relayed(api, mx_zone, monkeypatch):  # noqa: F811
    """A tenant whose pool (127.0.0.2) sends through an outbound relay on loopback."""
    relay = OutboundRelay("127.0.0.1", 0).start()
    monkeypatch.setenv("IP_POOL_EGRESS", "relay")
    tenant = make_tenant(api)
    chosen = pool(api, {"ipv4": "127.0.0.2", "hostname": "o2.relayed.test"},
                  relay_host=f"127.0.0.1:{relay.port}")
    assign(api, tenant, chosen["id"])
    yield tenant, relay
    relay.stop()
    smtp_client.close_cached()


def send(api, tenant, address, status):
    [r] = sent_ok(api, tenant, to=[address])["recipients"]
    wait_status(api, tenant, r["id"], status)
    return message(api, tenant, r["id"]), r


def test_the_relay_sends_from_the_pool_address_and_reports_the_mx(api, mx_zone, relayed):  # noqa: F811
    tenant, relay = relayed
    address = to(mx_zone, "relayed")
    shown, r = send(api, tenant, address, "Sent")
    [got] = mx_zone.received_for(address)
    assert (got.peer, got.helo) == ("127.0.0.2", "o2.relayed.test")
    [attempt] = shown["deliveries"]
    assert attempt["host"] == f"mx.{mx_zone.domain}:{mx_zone.port}"
    assert attempt["source_address"] == "127.0.0.2" and attempt["code"] == 250
    assert f"through the IP pool's relay 127.0.0.1:{relay.port}" in attempt["details"]
    assert attempt["output"].endswith("OK queued")
    # The same envelope again, now that the message is sent: refused (no open relay).
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=10) as client:
        client.ehlo("probe.test")
        client.mail(got.mail_from)
        code, reply = client.rcpt(address)
    assert code == 451 and b"relaying refused" in reply


def test_the_mx_refusal_reaches_the_worker_as_the_mx_said_it(api, mx_zone, relayed):  # noqa: F811
    tenant, _ = relayed
    mx_zone.script = ["rcpt:550 5.1.1 no such user", "451 4.3.0 try later"]
    gone = to(mx_zone, "gone")
    shown, _ = send(api, tenant, gone, "HardFail")
    [attempt] = shown["deliveries"]
    assert attempt["code"] == 550 and attempt["output"] == "5.1.1 no such user"
    assert "refused the recipient permanently" in attempt["details"]
    assert attempt["category"] == "unknown_user"
    suppressed = api.get(tenant.server_path + f"/suppressions/{gone}").json()["data"]
    assert suppressed["suppression"]["reason"] == "HardBounce"
    later = to(mx_zone, "later")
    shown, _ = send(api, tenant, later, "Sent")
    assert [d["status"] for d in shown["deliveries"]] == ["SoftFail", "Sent"]
    assert shown["deliveries"][0]["code"] == 451


def test_strangers_and_other_clients_are_refused(api, relayed, monkeypatch):
    _, relay = relayed
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=10) as client:
        client.ehlo("stranger.test")
        assert client.mail("someone@example.net")[0] == 250
        code, reply = client.rcpt("victim@example.org")
    assert code == 451 and b"not a message this service is delivering" in reply
    monkeypatch.setenv("OUTBOUND_RELAY_CLIENTS", "10.0.0.0/8")
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=10) as client:
        client.ehlo("outsider.test")
        code, reply = client.mail("someone@example.net")
    assert code == 550 and b"may not use the outbound relay" in reply


def test_the_gateway_starts_the_relay_when_configured(stack, monkeypatch):
    port = free_port()
    monkeypatch.setenv("OUTBOUND_RELAY_PORT", str(port))
    gateway = Gateway("127.0.0.1", 0, submission_ports=[], tls_port=None)
    gateway.start()
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            code, banner = client.ehlo("probe.test")
            assert code == 250 and client.has_extn("starttls")
    finally:
        gateway.stop()


def test_the_relay_sends_8bit_mail_7bit_and_signed_to_an_mx_without_8bitmime(
        stack, api, mx_zone, relayed):  # noqa: F811
    """Issue 32: the relay, which talks to the MX, converts as the worker would (the
    worker's hop to the relay keeps the bytes it stored)."""
    from email import message_from_bytes, policy

    from tests.support.delivery import BODY, submit_8bit
    from tests.support.sending import dns_txt, verify_dkim
    from tests.support import wait_for

    tenant, _ = relayed
    mx_zone.eightbitmime = False
    address = to(mx_zone, "seven")
    submit_8bit(stack, tenant, address)
    [got] = wait_for(lambda: mx_zone.received_for(address), message="the delivery")
    assert got.data.isascii() and "BODY=8BITMIME" not in got.mail_options
    parsed = message_from_bytes(got.data, policy=policy.default)
    assert parsed["Content-Transfer-Encoding"] == "quoted-printable"
    assert parsed.get_content().replace("\r\n", "\n") == BODY.replace("\r\n", "\n")
    assert verify_dkim(got.data, dns_txt(api, tenant))
