"""Development mode that holds, scheduled sends (send_at, Scheduled) and cancelling: through
HTTP and SMTP on the running stack, delivered (or not) to a real loopback MX."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib import clock
from tests.support.smtp import simple_mail, starttls_client
from tests.support.sending import message, rcpt, send, sent_ok, wait_status
from tests.support import Api, wait_for
from tests.support.sending import later, rfc3339, set_server

SERVER = "/api/v2/server"




def listed(api, tenant, **params) -> list[dict]:
    return Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                            params={"per_page": 100, **params}))["messages"]






# --- development mode -------------------------------------------------------------------

@pytest.mark.usefixtures("clear_smtp_auth_failures")
def test_development_mode_holds_every_message_from_both_doors(stack, api, tenant, mx):
    assert set_server(api, tenant, mode="Development")["mode"] == "Development"
    to = rcpt("dev")
    [http] = sent_ok(api, tenant, to=[to], tag="dev")["recipients"]
    assert http["status"] == "Held"
    smtp_to = rcpt("devsmtp")
    with starttls_client(stack.smtp_port) as client:
        client.login("any", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [smtp_to],
                        simple_mail(f"app@{tenant.domain}", smtp_to))
    [from_smtp] = wait_for(lambda: listed(api, tenant, query=smtp_to))
    for shown in (message(api, tenant, http["id"]), message(api, tenant, from_smtp["id"])):
        assert shown["status"] == "Held" and shown["held"] is True
        assert shown["status_details"] == "server in development mode"
        assert [e["event"] for e in shown["events"]] == ["MessageHeld"]
        assert shown["deliveries"] == []
    # Tracked and listed as usual.
    assert [m["id"] for m in listed(api, tenant, status="Held", tag="dev")] == [http["id"]]
    # Releasing is refused while in Development mode.
    error = Api.error(api.post(f"{SERVER}/messages/{http['id']}/retry",
                               server_key=tenant.api_key), 422, "ValidationError")
    assert "Development" in error["message"]

    # Back to Live: new mail goes out, the held mail stays held (never released by the switch).
    set_server(api, tenant, mode="Live")
    [live] = sent_ok(api, tenant)["recipients"]
    wait_status(api, tenant, live["id"], "Sent")
    assert message(api, tenant, http["id"])["status"] == "Held"
    assert mx.received_for(to) == [] and mx.received_for(smtp_to) == []


def test_a_message_queued_before_the_switch_to_development_is_held_by_the_worker(
        api, tenant, mx):
    [scheduled] = sent_ok(api, tenant, send_at=later(hours=1))["recipients"]
    assert scheduled["status"] == "Scheduled"
    set_server(api, tenant, mode="Development")
    clock.advance(timedelta(hours=1, seconds=5))
    shown = wait_status(api, tenant, scheduled["id"], "Held")
    assert shown["status_details"] == "server in development mode"
    assert shown["deliveries"] == [] and mx.received_for(scheduled["rcpt_to"]) == []


# --- scheduled sends ---------------------------------------------------------------------

def test_send_at_in_the_future_is_scheduled_until_then(api, tenant, mx):
    send_at = clock.now().replace(microsecond=0) + timedelta(hours=2)
    result = sent_ok(api, tenant, send_at=rfc3339(send_at))
    [recipient] = result["recipients"]
    assert recipient["status"] == "Scheduled"
    shown = message(api, tenant, recipient["id"])
    assert shown["status"] == "Scheduled" and shown["next_attempt_at"] == rfc3339(send_at)
    assert [m["id"] for m in listed(api, tenant, status="Scheduled")] == [recipient["id"]]
    # A Pending message sent meanwhile goes out; the scheduled one waits.
    [now_] = sent_ok(api, tenant)["recipients"]
    wait_status(api, tenant, now_["id"], "Sent")
    assert message(api, tenant, recipient["id"])["status"] == "Scheduled"
    assert mx.received_for(recipient["rcpt_to"]) == []

    clock.advance(timedelta(hours=2, seconds=5))
    wait_status(api, tenant, recipient["id"], "Sent")
    assert len(mx.received_for(recipient["rcpt_to"])) == 1


def test_send_at_now_or_in_the_past_sends_now(api, tenant, mx):
    [recipient] = sent_ok(api, tenant, send_at="2001-01-01T00:00:00+02:00")["recipients"]
    assert recipient["status"] == "Pending"
    wait_status(api, tenant, recipient["id"], "Sent")


@pytest.mark.parametrize("value, words", [
    (None, "30 days"), ("2030-01-01T09:00:00", "time zone"), ("tomorrow", "send_at")])
def test_send_at_out_of_range_or_malformed_is_a_422_naming_it(api, tenant, value, words):
    value = value or later(days=30, minutes=5)
    error = Api.error(send(api, tenant, send_at=value), 422, "ValidationError")
    assert error["field"] == "send_at" and words in error["message"]
    assert listed(api, tenant) == []


def test_send_at_applies_to_template_sends_and_batches(api, tenant, mx):
    Api.data(api.post(f"{SERVER}/templates", {"name": "T", "permalink": "t",
                                              "subject": "Hi {{name}}", "text_body": "x"},
                      server_key=tenant.api_key), 201)
    body = {"template": "t", "from": f"app@{tenant.domain}", "to": [rcpt()],
            "send_at": later(minutes=30), "template_model": {"name": "A"}}
    data = Api.data(api.post(f"{SERVER}/messages/with_template", body,
                             server_key=tenant.api_key), 201)
    assert data["recipients"][0]["status"] == "Scheduled"
    batch = Api.data(api.post(f"{SERVER}/messages/batch", {"messages": [
        {"from": f"app@{tenant.domain}", "to": [rcpt()], "text_body": "1",
         "send_at": later(minutes=30)},
        {"from": f"app@{tenant.domain}", "to": [rcpt()], "text_body": "2"}]},
        server_key=tenant.api_key))
    assert [m["data"]["recipients"][0]["status"] for m in batch["messages"]] == \
        ["Scheduled", "Pending"]


# --- cancel ------------------------------------------------------------------------------

def test_cancel_a_scheduled_message_nothing_is_sent(api, tenant, mx):
    [recipient] = sent_ok(api, tenant, send_at=later(hours=1))["recipients"]
    cancelled = Api.data(api.post(f"{SERVER}/messages/{recipient['id']}/cancel",
                                  server_key=tenant.api_key))["message"]
    assert cancelled["status"] == "Cancelled" and cancelled["next_attempt_at"] is None
    shown = message(api, tenant, recipient["id"])
    assert [e["event"] for e in shown["events"]] == ["MessageCancelled"]
    assert [m["id"] for m in listed(api, tenant, status="Cancelled")] == [recipient["id"]]
    clock.advance(timedelta(hours=1, seconds=5))
    [other] = sent_ok(api, tenant)["recipients"]
    wait_status(api, tenant, other["id"], "Sent")
    assert message(api, tenant, recipient["id"])["status"] == "Cancelled"
    assert mx.received_for(recipient["rcpt_to"]) == []
    # Cancelling twice says why.
    error = Api.error(api.post(f"{SERVER}/messages/{recipient['id']}/cancel",
                               server_key=tenant.api_key), 422, "ValidationError")
    assert "Cancelled" in error["message"]


def test_cancel_a_sent_message_is_a_422_and_unknown_is_a_404(api, tenant, mx):
    [recipient] = sent_ok(api, tenant)["recipients"]
    wait_status(api, tenant, recipient["id"], "Sent")
    error = Api.error(api.post(f"{SERVER}/messages/{recipient['id']}/cancel",
                               server_key=tenant.api_key), 422, "ValidationError")
    assert "is Sent" in error["message"] and error["field"] == "status"
    Api.error(api.post(f"{SERVER}/messages/999999999/cancel", server_key=tenant.api_key),
              404, "NotFound")


def test_cancel_a_pending_message_before_any_attempt(api, tenant, db):
    """A Pending message no worker has touched yet (its domain's MX is not reachable in this
    test: no relay, and it is cancelled in the same breath)."""
    from chalicelib.db.models import Message
    from chalicelib.services.messages import actions

    [recipient] = sent_ok(api, tenant, send_at=later(hours=1))["recipients"]
    row = db.get(Message, recipient["id"])
    row.status = "Pending"  # as if due, but not claimed by any worker yet
    db.commit()
    assert actions.cancel(db, row).status == "Cancelled"
    db.commit()
    # A claimed (in-flight) message cannot be cancelled.
    [other] = sent_ok(api, tenant, send_at=later(hours=1))["recipients"]
    row = db.get(Message, other["id"])
    row.locked_by, row.locked_at = "worker", clock.now()
    db.commit()
    with pytest.raises(Exception) as refused:
        actions.cancel(db, row)
    assert "being delivered" in str(refused.value)



def test_send_at_that_overflows_in_utc_is_a_422(api, tenant):
    error = Api.error(send(api, tenant, send_at="9999-12-31T23:00:00-05:00"), 422,
                      "ValidationError")
    assert error["field"] == "send_at"


def test_webhooks_hear_a_development_hold_but_not_a_cancel(api, tenant, db):
    """MessageHeld is one of the four webhook events; MessageCancelled is history only."""
    from sqlalchemy import select

    from chalicelib.db.models import WebhookRequest

    Api.data(api.post(f"{tenant.server_path}/webhooks",
                      {"name": "all", "url": "http://127.0.0.1:9/hook", "events": []}), 201)
    [scheduled] = sent_ok(api, tenant, send_at=later(hours=1))["recipients"]
    Api.data(api.post(f"{SERVER}/messages/{scheduled['id']}/cancel", server_key=tenant.api_key))
    set_server(api, tenant, mode="Development")
    [held] = sent_ok(api, tenant)["recipients"]
    db.rollback()
    events = {(row.message_id, row.event) for row in db.scalars(
        select(WebhookRequest).where(WebhookRequest.message_id.in_(
            [scheduled["id"], held["id"]])))}
    db.rollback()
    assert events == {(held["id"], "MessageHeld")}
