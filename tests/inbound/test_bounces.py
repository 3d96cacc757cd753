"""Bounces: a real RFC 3464 DSN (multipart/report) arriving over SMTP at a message's return
path is matched to the message, stored as a bounce, marks the original bounced and suppresses
its recipient; GET /bounces shows the parsed status code and diagnostic."""
from __future__ import annotations

import pytest

from tests.smtp.support import plain_client
from tests.mx import ScriptedMX
from tests.support import Api, unique, wait_for

SERVER = "/api/v2/server"


def dsn(return_path: str, original_rcpt: str, *, status="5.1.1", action="failed",
        diagnostic="smtp; 550 5.1.1 <{rcpt}>: Recipient address rejected: User unknown") -> bytes:
    diagnostic = diagnostic.format(rcpt=original_rcpt)
    return (f"From: MAILER-DAEMON@mx.recipient.example\r\nTo: {return_path}\r\n"
            "Subject: Undelivered Mail Returned to Sender\r\nMIME-Version: 1.0\r\n"
            "Content-Type: multipart/report; report-type=delivery-status; boundary=\"RR\"\r\n"
            "\r\n--RR\r\nContent-Type: text/plain\r\n\r\n"
            "I'm sorry to have to inform you that your message could not be delivered.\r\n"
            "\r\n--RR\r\nContent-Type: message/delivery-status\r\n\r\n"
            "Reporting-MTA: dns; mx.recipient.example\r\n"
            "Arrival-Date: Mon, 1 Jan 2024 10:00:00 +0000\r\n\r\n"
            f"Final-Recipient: rfc822; {original_rcpt}\r\nOriginal-Recipient: rfc822;"
            f" {original_rcpt}\r\nAction: {action}\r\nStatus: {status}\r\n"
            "Remote-MTA: dns; mail.recipient.example\r\n"
            f"Diagnostic-Code: {diagnostic}\r\n"
            "\r\n--RR\r\nContent-Type: text/rfc822-headers\r\n\r\n"
            f"From: app@sender.example\r\nTo: {original_rcpt}\r\nSubject: Hello\r\n"
            "\r\n--RR--\r\n").encode()


@pytest.fixture
def sent(stack, api, tenant, monkeypatch):
    """One message sent over HTTP and delivered to a loopback MX: (message record, MX copy)."""
    mx = ScriptedMX().start()
    monkeypatch.setenv("DELIVERY_RELAY", mx.relay)
    to = f"{unique('gone')}@recipient.example"
    result = Api.data(api.post(f"{SERVER}/messages", {
        "from": f"app@{tenant.domain}", "to": [to], "subject": "Hello", "text_body": "Hi"},
        server_key=tenant.api_key), 201)
    [received] = wait_for(lambda: mx.received_for(to), 20, message="delivery")
    mx.stop()
    # A DSN follows a recorded delivery (the worker writes Sent right after the MX's 250).
    wait_for(lambda: message(api, tenant, result["recipients"][0]["id"])["status"] == "Sent",
             20, message="Sent recorded")
    yield result["recipients"][0], received


def message(api, tenant, message_id):
    return Api.data(api.get(f"{SERVER}/messages/{message_id}",
                            server_key=tenant.api_key))["message"]


def test_hard_bounce_matched_stored_and_suppressed(stack, api, tenant, sent):
    recipient, received = sent
    return_path = received.mail_from
    assert return_path == f"{recipient['token']}@rp.{tenant.domain}"  # the domain's own
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [return_path], dsn(return_path, recipient["rcpt_to"]))
    [bounce] = Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]
    assert bounce["bounce"] is True and bounce["original_message_id"] == recipient["id"]
    assert bounce["status_code"] == "5.1.1" and bounce["action"] == "failed"
    assert bounce["bounce_type"] == "hard"
    assert "User unknown" in bounce["diagnostic"]
    assert bounce["final_recipient"] == recipient["rcpt_to"]
    assert bounce["remote_mta"] == "mail.recipient.example"
    shown = Api.data(api.get(f"{SERVER}/bounces/{bounce['id']}",
                             server_key=tenant.api_key))["bounce"]
    assert shown["original_message"]["status"] == "Bounced"
    assert message(api, tenant, recipient["id"])["status"] == "Bounced"
    suppressions = Api.data(api.get(tenant.server_path + "/suppressions"))["suppressions"]
    assert recipient["rcpt_to"] in [s["address"] for s in suppressions]
    # The bounce is not an inbound message, and unknown ids are 404.
    assert Api.data(api.get(f"{SERVER}/inbound", server_key=tenant.api_key))["messages"] == []
    Api.error(api.get(f"{SERVER}/bounces/99999999", server_key=tenant.api_key), 404, "NotFound")


def test_delay_report_is_recorded_without_bouncing(stack, api, tenant, sent):
    recipient, received = sent
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from],
                        dsn(received.mail_from, recipient["rcpt_to"], status="4.4.7",
                            action="delayed", diagnostic="smtp; 451 4.4.7 try later"))
    [bounce] = Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]
    assert bounce["bounce_type"] == "soft" and bounce["status_code"] == "4.4.7"
    assert message(api, tenant, recipient["id"])["status"] == "Sent"


def test_unknown_return_path_refused_at_rcpt(stack):
    with plain_client(stack.smtp_port) as client:
        client.mail("")
        code, _ = client.rcpt("no-such-token@rp.mx.service.test")
        assert code == 550


def test_other_servers_do_not_see_the_bounce(stack, api, tenant, sent):
    from tests.support import make_tenant

    recipient, received = sent
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], dsn(received.mail_from, recipient["rcpt_to"]))
    other = make_tenant(api)
    assert Api.data(api.get(f"{SERVER}/bounces", server_key=other.api_key))["bounces"] == []


def test_an_expired_relay_report_bounces_the_message_but_not_the_recipient(stack, api, tenant,
                                                                            sent):
    # Action: failed with a 4.x.x status: a relay gave up; the address may be fine (the
    # policy counts it as a repeat, it never suppresses at once). It used to suppress.
    recipient, received = sent
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], dsn(
            received.mail_from, recipient["rcpt_to"], status="4.4.1",
            diagnostic="smtp; 421 4.4.1 Connection timed out"))
    [bounce] = Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]
    assert bounce["bounce_type"] == "hard" and bounce["reason"] in ("expired", "network")
    assert bounce["about_recipient"] is False and bounce["suppressed"] is False
    assert message(api, tenant, recipient["id"])["status"] == "Bounced"
    suppressions = Api.data(api.get(tenant.server_path + "/suppressions"))["suppressions"]
    assert recipient["rcpt_to"] not in [s["address"] for s in suppressions]


def test_the_owner_sees_why_an_address_was_suppressed(stack, api, tenant, sent):
    recipient, received = sent
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], dsn(received.mail_from, recipient["rcpt_to"]))
    [bounce] = Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]
    assert bounce["reason"] == "no_such_user" and bounce["about_recipient"] is True
    assert bounce["suppressed"] is True
    assert message(api, tenant, recipient["id"])["bounce_reason"] == "no_such_user"
    [entry] = Api.data(api.get(tenant.server_path + "/suppressions"))["suppressions"]
    assert entry["reason"] == "HardBounce" and entry["origin"] == "bounce"
    assert entry["bounce_reason"] == "no_such_user" and entry["message_id"] == recipient["id"]
    assert "User unknown" in entry["details"]
