"""Bounces: a real RFC 3464 DSN (multipart/report) arriving over SMTP at a message's return
path is matched to the message, stored as a bounce, marks the original bounced and suppresses
its recipient; GET /bounces shows the parsed status code and diagnostic."""
from __future__ import annotations


from tests.support.smtp import plain_client
from tests.support import Api
from tests.support.inbound import dsn
from tests.support.sending import message

SERVER = "/api/v2/server"








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
