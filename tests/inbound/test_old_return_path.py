"""No bounce lost (issue 34, item 8): a message records the return-path host it went out
with; after its domain changes its return path (or is removed), a DSN to
``<token>@<old host>.<domain>`` is still accepted at RCPT and matched, while that mail is
kept; the bounce is written in the message's history (GET .../messages/{id}), never as a
webhook."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.models import WebhookRequest, WebhookRequestLog
from tests.inbound.postfix_dsn import postfix_dsn
from tests.receivers import Receiver
from tests.support.sending import message, rcpt, sent_ok, wait_status
from tests.support.smtp import plain_client
from tests.support import Api, all_tenants, wait_for

SERVER = "/api/v2/server"


def _deliver(api, tenant, mx):
    to = rcpt("rp")
    recipient = sent_ok(api, tenant, to=[to])["recipients"][0]
    [received] = wait_for(lambda: mx.received_for(to), 20, message=f"mail to {to}")
    return wait_status(api, tenant, recipient["id"], "Sent"), received


def _rcpt(stack, address: str) -> tuple[int, bytes]:
    with plain_client(stack.smtp_port) as client:
        client.mail("")
        return client.rcpt(address)


def test_a_bounce_to_the_former_return_path_is_accepted_and_in_the_history(
        api, stack, tenant, mx):
    domain_path = f"{tenant.server_path}/domains/{tenant.domain}"
    with Receiver([200]) as hooks:
        hook = Api.data(api.post(tenant.server_path + "/webhooks",
                                 {"name": "all", "url": hooks.url, "events": []}), 201)
        hook_id = hook["webhook"]["id"]
        first, received = _deliver(api, tenant, mx)
        assert received.mail_from == f"{first['token']}@rp.{tenant.domain}"
        assert first["return_path"] == f"rp.{tenant.domain}"

        # The tenant moves its return path to bounces.<domain> and verifies it
        Api.data(api.patch(domain_path, {"return_path_host": "bounces"}))
        Api.data(api.post(domain_path + "/verify"))
        second, received = _deliver(api, tenant, mx)
        assert received.mail_from == f"{second['token']}@bounces.{tenant.domain}"
        assert second["return_path"] == f"bounces.{tenant.domain}"
        assert message(api, tenant, first["id"])["return_path"] == f"rp.{tenant.domain}"

        # Postfix bounces the first message to the host it went out with: accepted, matched
        old = f"{first['token']}@rp.{tenant.domain}"
        dsn = postfix_dsn(old, first["rcpt_to"], mx.received_for(first["rcpt_to"])[0].data)
        with plain_client(stack.smtp_port) as client:
            assert client.sendmail("", [old], dsn) == {}
        shown = wait_status(api, tenant, first["id"], "Bounced")
        [bounce] = Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]
        assert bounce["original_message_id"] == first["id"]
        events = [e["event"] for e in shown["events"]]
        assert events == ["MessageSent", "MessageBounced"]
        details = shown["events"][-1]["details"]
        assert "hard bounce from mx.recipient.example" in details and "5.1.1" in details
        assert f"(bounce {bounce['id']})" in details

        # A history event, not a webhook: none was queued or attempted for it
        wait_for(lambda: len(hooks.requests) >= 2, 20, message="the two MessageSent hooks")
        assert {r.json()["event"] for r in hooks.requests} == {"MessageSent"}
        with all_tenants() as db:
            for model in (WebhookRequest, WebhookRequestLog):
                assert set(db.scalars(select(model.event).where(
                    model.webhook_id == hook_id))) <= {"MessageSent"}

    # Unknown tokens at the old host are refused at RCPT, as at any return path; a host the
    # domain never had is not ours at all
    assert _rcpt(stack, f"no-such-token@rp.{tenant.domain}")[0] == 550
    assert _rcpt(stack, f"{first['token']}@other.{tenant.domain}")[0] == 530

    # Once the mail sent with it is gone (the server's retention), the old host is not ours
    clock.advance(timedelta(days=61))
    assert _rcpt(stack, f"{first['token']}@rp.{tenant.domain}")[0] == 530
    assert _rcpt(stack, f"{second['token']}@bounces.{tenant.domain}")[0] == 250


def test_a_removed_domain_keeps_its_return_path_for_its_mail(api, stack, tenant, mx):
    sent, _ = _deliver(api, tenant, mx)
    address = f"{sent['token']}@rp.{tenant.domain}"
    Api.data(api.patch(tenant.server_path, {"message_retention_days": 7}))
    Api.data(api.delete(f"{tenant.server_path}/domains/{tenant.domain}"))
    assert _rcpt(stack, address)[0] == 250
    clock.advance(timedelta(days=6))
    assert _rcpt(stack, address)[0] == 250
    # A longer retention keeps the old host longer (its mail is kept longer)
    Api.data(api.patch(tenant.server_path, {"message_retention_days": 30}))
    clock.advance(timedelta(days=2))
    assert _rcpt(stack, address)[0] == 250
    clock.advance(timedelta(days=23))
    assert _rcpt(stack, address)[0] == 530


def test_each_kind_of_report_has_its_history_event(api, tenant):
    """A bounce, a delay notice, a complaint and an authentication-failure report (RFC 6591,
    never a complaint) each write their own line in the original's history."""
    from chalicelib.db.models import Message, MessageEvent
    from chalicelib.services.inbound import return_path
    from tests.support.reputation import messages, server_id

    [message_id] = messages(server_id(api, tenant), 1)
    reports = [
        {"type": "hard", "status": "5.1.1", "diagnostic": "550 5.1.1 unknown",
         "reporting_mta": "mx.example.net"},
        {"type": "soft", "status": "4.4.7", "diagnostic": None, "reporting_mta": None},
        {"type": "complaint", "feedback_type": "abuse", "user_agent": "Yahoo!-Mail-Feedback"},
        {"type": "auth_failure", "feedback_type": "auth-failure", "user_agent": None},
    ]
    with all_tenants() as db:
        original = db.get(Message, message_id)
        for report in reports:
            return_path.history_event(db, original, original, report)
        rows = db.scalars(select(MessageEvent).where(MessageEvent.message_id == message_id)
                          .order_by(MessageEvent.id)).all()
        assert [(r.event, r.details) for r in rows] == [
            ("MessageBounced", f"hard bounce from mx.example.net: 5.1.1 550 5.1.1 unknown "
                               f"(bounce {message_id})"),
            ("MessageBounced", f"delay notice: 4.4.7 (bounce {message_id})"),
            ("MessageComplained", f"abuse report from Yahoo!-Mail-Feedback (bounce {message_id})"),
            ("MessageAuthFailureReported",
             f"auth-failure report from a feedback loop (bounce {message_id})")]
