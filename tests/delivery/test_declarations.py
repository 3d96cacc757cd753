"""What the sending client declares (issue 32 item 3, RFC 6152, RFC 6531, RFC 1870), through
the running stack and a real MX on loopback: ``BODY=8BITMIME``, ``SMTPUTF8`` and ``SIZE=``
when the MX offers them; to an MX without 8BITMIME an 8-bit body goes quoted-printable and
the DKIM signature still verifies; a message that needs SMTPUTF8 to an MX without it, or
larger than its SIZE, fails permanently before MAIL FROM with a reason that says so and
never suppresses the recipient. IDN domains are looked up and written as A-labels."""
from __future__ import annotations

from email import message_from_bytes, policy

import pytest

from chalicelib.services.delivery import client as delivery
from tests.dns_server import LoopbackDNS
from tests.mx import ScriptedMX
from tests.support.sending import (dns_txt, rcpt, sent_ok, verify_dkim,
                                        wait_status)
from tests.support import Api, unique, wait_for
from tests.support.delivery import BODY, submit_8bit





@pytest.fixture
def own_mx(monkeypatch, stack):
    """Start an MX with the extensions a test asks for; the stack delivers to it."""
    started: list[ScriptedMX] = []

    def start(**offers) -> ScriptedMX:
        server = ScriptedMX(**offers).start()
        started.append(server)
        monkeypatch.setenv("DELIVERY_RELAY", server.relay)
        monkeypatch.setenv("TIME_SCALE", "0.0001")
        return server

    yield start
    delivery.close_cached()
    for server in started:
        server.stop()


def suppressed(api, tenant, address: str) -> bool:
    listed = Api.data(api.get(f"{tenant.server_path}/suppressions"))["suppressions"]
    return any(s["address"] == address.lower() for s in listed)


def test_an_8bit_body_is_declared_with_its_size(stack, api, tenant, own_mx):
    mx = own_mx()
    to = rcpt("eight")
    submit_8bit(stack, tenant, to)
    [received] = wait_for(lambda: mx.received_for(to), message="the delivery")
    assert not received.data.isascii()  # kept as submitted
    assert "BODY=8BITMIME" in received.mail_options
    sizes = [o for o in received.mail_options if o.startswith("SIZE=")]
    assert sizes and abs(int(sizes[0][5:]) - len(received.data)) <= 2
    assert "SMTPUTF8" not in received.mail_options
    assert verify_dkim(received.data, dns_txt(api, tenant))


def test_without_8bitmime_the_body_goes_quoted_printable_and_still_verifies(
        stack, api, tenant, own_mx):
    mx = own_mx(eightbitmime=False, size=None)
    to = rcpt("seven")
    submit_8bit(stack, tenant, to)
    [received] = wait_for(lambda: mx.received_for(to), message="the delivery")
    assert received.data.isascii()
    assert received.mail_options == []  # nothing it does not offer
    parsed = message_from_bytes(received.data, policy=policy.default)
    assert parsed["Content-Transfer-Encoding"] == "quoted-printable"
    assert parsed.get_content().replace("\r\n", "\n") == BODY.replace("\r\n", "\n")
    assert verify_dkim(received.data, dns_txt(api, tenant))


def test_internationalized_mail_declares_smtputf8_where_offered(api, tenant, own_mx):
    mx = own_mx(smtputf8=True)
    to = f"{unique('zoë')}@recipient.example"
    [r] = sent_ok(api, tenant, to=[to], subject="Grüße")["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    [received] = mx.received_for(to)
    assert {"SMTPUTF8", "BODY=8BITMIME"} <= set(received.mail_options)
    assert verify_dkim(received.data, dns_txt(api, tenant))


def test_internationalized_mail_to_a_server_without_smtputf8_fails_permanently(
        api, tenant, own_mx):
    """RFC 6531 3.4: not sent; a HardFail whose reason says why; the address is fine, so it
    is not suppressed (the failures taxonomy reads 5.6.7 as the message's)."""
    mx = own_mx()
    to = f"{unique('zoë')}@recipient.example"
    [r] = sent_ok(api, tenant, to=[to])["recipients"]
    shown = wait_status(api, tenant, r["id"], "HardFail")
    assert "5.6.7" in shown["status_details"]
    assert "does not support internationalized mail" in shown["status_details"]
    [attempt] = shown["deliveries"]
    assert attempt["stage"] == "envelope" and attempt["reason"] == "invalid_message"
    assert not mx.messages and to not in mx.rcpts_seen
    assert not suppressed(api, tenant, to)


def test_a_message_over_the_servers_size_fails_before_data(api, tenant, own_mx):
    mx = own_mx(size=2000)
    to = rcpt("big")
    [r] = sent_ok(api, tenant, to=[to], text_body="x " * 2000)["recipients"]
    shown = wait_status(api, tenant, r["id"], "HardFail")
    assert "5.3.4" in shown["status_details"] and "2000" in shown["status_details"]
    [attempt] = shown["deliveries"]
    assert attempt["stage"] == "envelope" and attempt["reason"] == "message_too_large"
    assert not mx.messages and not mx.rcpts_seen
    assert not suppressed(api, tenant, to)


def test_an_idn_domain_is_looked_up_as_its_a_label(monkeypatch):
    zone = {("xn--bcher-kva.test.", "A"): ["192.0.2.9"]}
    monkeypatch.delenv("DELIVERY_RELAY", raising=False)
    with LoopbackDNS(zone) as server:
        monkeypatch.setenv("DNS_RESOLVERS", f"127.0.0.1:{server.port}")
        assert delivery.targets("bücher.test") == [("xn--bcher-kva.test", 25)]


def test_an_ascii_mailbox_at_an_idn_domain_goes_as_its_a_label_without_smtputf8():
    mx = ScriptedMX().start()
    try:
        data = (b"From: a@rp.example\r\nTo: someone@xn--bcher-kva.example\r\n"
                b"Subject: hi\r\n\r\nhello\r\n")
        outcome = delivery.send([(mx.host, mx.port)], mail_from="t@rp.example",
                                rcpt_to="someone@bücher.example", data=data)
        assert outcome.status == delivery.SENT, outcome.details
        [received] = mx.messages
        assert received.rcpt_tos == ["someone@xn--bcher-kva.example"]
        assert "SMTPUTF8" not in received.mail_options
    finally:
        delivery.close_cached()
        mx.stop()


def test_the_plan_reads_the_features_as_rfc_1870_and_6152_say():
    """SIZE without a number (or 0) is no limit; after HELO (no features) 8-bit data is to be
    converted and nothing declared."""
    from chalicelib.services.delivery import declarations

    data = b"Subject: x\r\n\r\n" + "é".encode() * 5000 + b"\r\n"
    plan = declarations.plan({"size": "", "8bitmime": ""}, data, mail_from="a@b.example",
                             rcpt_to="c@d.example")
    assert plan.refusal is None and plan.mail_options == ("BODY=8BITMIME", f"SIZE={len(data)}")
    plan = declarations.plan({"size": "0"}, data, mail_from="a@b.example", rcpt_to="c@d.example")
    assert plan.convert and plan.mail_options == ()
    plan = declarations.plan({}, b"Subject: x\r\n\r\nhi\r\n", mail_from="a@b.example",
                             rcpt_to="c@d.example")
    assert not plan.convert and plan.mail_options == ()
