"""Webhooks for real sends: POST /api/v2/server/messages -> delivery worker -> a scripted
loopback MX -> events -> signed webhook POSTs to a real loopback receiver."""
from __future__ import annotations

import pytest

from tests.support.webhooks import create_webhook, log_rows, openssl_verifies, queue_rows
from tests.mx import ScriptedMX
from tests.receivers import Receiver
from tests.support import Api, unique, wait_for

SERVER = "/api/v2/server"


@pytest.fixture
def mx(monkeypatch, stack):
    server = ScriptedMX().start()
    monkeypatch.setenv("DELIVERY_RELAY", server.relay)
    # Mail retries 0.6 s apart: each event's webhook is long delivered before the next event.
    monkeypatch.setenv("DELIVERY_RETRY_SCHEDULE", "1,1,1")
    monkeypatch.setenv("TIME_SCALE", "0.01")
    yield server
    server.stop()


def send(api, tenant, to: str, **fields) -> dict:
    body = {"from": f"Shop <app@{tenant.domain}>", "to": [to], "subject": "Order",
            "text_body": "Thanks", **fields}
    [recipient] = Api.data(api.post(f"{SERVER}/messages", body, server_key=tenant.api_key),
                           201)["recipients"]
    return recipient


def for_message(rx: Receiver, message_id: int) -> list:
    return [r for r in list(rx.requests) if r.json()["payload"]["message"]["id"] == message_id]


def wait_events(rx: Receiver, message_id: int, count: int) -> list:
    return wait_for(lambda: (found := for_message(rx, message_id)) and len(found) >= count
                    and found, 30, message=f"{count} webhook(s) for message {message_id}")


def test_each_event_of_a_real_send_arrives_signed_and_in_order(api, tenant, mx):
    with Receiver([200]) as every, Receiver([200]) as failures, Receiver([200]) as off_rx:
        create_webhook(api, tenant, every.url, headers={"X-Token": "tok-123"})
        create_webhook(api, tenant, failures.url,
                       events=["MessageDeliveryFailed", "MessageHeld"])
        off = create_webhook(api, tenant, off_rx.url)
        Api.data(api.post(tenant.server_path + f"/webhooks/{off['id']}/disable"))

        # Deferred twice, then delivered: two MessageDelayed, then one MessageSent.
        mx.script = ["451 4.7.1 greylisted", "452 4.2.2 mailbox busy", "250"]
        to = f"{unique('defer')}@recipient.example"
        sent = send(api, tenant, to, tag="orders", metadata={"order": 42})
        deliveries = wait_events(every, sent["id"], 3)
        assert [r.json()["event"] for r in deliveries] == ["MessageDelayed", "MessageDelayed",
                                                           "MessageSent"]
        assert len({r.json()["uuid"] for r in deliveries}) == 3
        for request in deliveries:
            payload = request.json()
            assert request.headers["x-service-event"] == payload["event"]
            assert request.headers["x-service-uuid"] == payload["uuid"]
            assert request.headers["x-token"] == "tok-123"
            assert openssl_verifies(request.body, request.headers["x-service-signature"])
            message = payload["payload"]["message"]
            assert message["id"] == sent["id"] and message["token"] == sent["token"]
            assert message["rcpt_to"] == to and message["mail_from"] == f"app@{tenant.domain}"
            assert message["scope"] == "outgoing" and message["bounce"] is False
            assert message["tag"] == "orders" and message["metadata"] == {"order": 42}
            assert isinstance(payload["timestamp"], int) and "test" not in payload
        assert "greylisted" in deliveries[0].json()["payload"]["details"]

        # A hard rejection: MessageDeliveryFailed.
        mx.script = ["rcpt:550 5.1.1 no such user"]
        failed = send(api, tenant, f"{unique('gone')}@recipient.example")
        [event] = wait_events(every, failed["id"], 1)
        assert event.json()["event"] == "MessageDeliveryFailed"
        assert "no such user" in event.json()["payload"]["details"]

        # A suppressed recipient: MessageHeld, straight from the submission.
        held_to = f"{unique('held')}@recipient.example"
        Api.data(api.post(tenant.server_path + "/suppressions", {"address": held_to}), 201)
        held = send(api, tenant, held_to)
        assert held["status"] == "Held"
        [event] = wait_events(every, held["id"], 1)
        assert event.json()["event"] == "MessageHeld"

        assert [r.json()["event"] for r in failures.wait_for(2)] == ["MessageDeliveryFailed",
                                                                     "MessageHeld"]
        wait_for(lambda: not queue_rows(off["id"]))
    assert len(every.requests) == 5 and len(failures.requests) == 2
    assert off_rx.requests == [] and log_rows(off["id"]) == []  # disabled: nothing at all


def test_an_attempt_consumes_the_sweepers_wakeup(api, tenant):
    """A retried row may be woken by the sweeper again as soon as it is due (woken_at cleared),
    not only after SWEEP_REWAKE_SECONDS."""
    from datetime import timedelta

    from sqlalchemy import update

    from chalicelib import clock
    from tests.support import all_tenants
    from chalicelib.db.models import WebhookRequest
    from chalicelib.services.webhooks import deliver
    from tests.support.webhooks import emit, make_message

    with Receiver([500, 500, 500]) as failing:
        hook = create_webhook(api, tenant, failing.url)
        emit(make_message(tenant), "MessageSent")
        wait_for(lambda: log_rows(hook["id"]), message="the first attempt")
        [row] = queue_rows(hook["id"])
        with all_tenants() as db:  # due again, woken by a sweep (so no other sweep takes it)
            db.execute(update(WebhookRequest).where(WebhookRequest.id == row.id).values(
                woken_at=clock.now(), next_attempt_at=clock.now() - timedelta(seconds=1)))
        deliver.process(row.id)
        [row] = queue_rows(hook["id"])
        assert row.attempts == 2 and row.woken_at is None
