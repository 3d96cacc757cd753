"""Webhooks through real HTTP and a real receiver on loopback: management, fan-out of events,
signed delivery, retries with backoff, the attempt log, the test endpoint and URL safety.
Events are emitted directly here, as the sending pipeline does (the send-driven tests live in
test_webhooks_sending.py)."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

from sqlalchemy import select

from chalicelib.db.models import Webhook, WebhookRequest
from chalicelib.services.webhooks import deliver
from tests.support.webhooks import (create_webhook, emit, log_rows, make_message,
                                       openssl_verifies, queue_rows)
from tests.receivers import Receiver, Reply
from tests.support import Api, all_tenants, wait_for

EVENTS = ["MessageSent", "MessageDelayed", "MessageDeliveryFailed", "MessageHeld"]


def test_management_masks_secret_headers_and_validates(api, tenant):
    base = tenant.server_path + "/webhooks"
    hook = create_webhook(api, tenant, "http://127.0.0.1:9/x", events=["MessageSent"],
                          headers={"X-Secret": "hunter2-value"})
    assert hook["headers"] == {"X-Secret": "••••••"} and hook["sign"] is True
    assert hook["enabled"] is True and hook["events"] == ["MessageSent"]
    listed = Api.data(api.get(base))
    assert [w["id"] for w in listed["webhooks"]] == [hook["id"]]
    assert "hunter2-value" not in api.get(base + f"/{hook['id']}").text
    with all_tenants() as db:
        stored = db.get(Webhook, hook["id"]).headers_encrypted
    assert stored and "hunter2" not in stored

    err = Api.error(api.post(base, {"url": "http://127.0.0.1:9/", "events": ["MessageBounced"]}),
                    422, "ValidationError")
    assert "MessageBounced" in err["message"] and all(e in err["message"] for e in EVENTS)
    assert err["field"] == "events"
    Api.error(api.post(base, {"url": "ftp://example.com/x"}), 422, "ValidationError")
    Api.error(api.post(base, {"name": "x"}), 400, "ParameterMissing")
    Api.error(api.post(base, {"url": "http://127.0.0.1:9/", "events": "MessageSent"}),
              422, "ValidationError")
    err = Api.error(api.post(base, {"url": "http://127.0.0.1:9/",
                                    "headers": {"X-Service-Signature": "forged"}}),
                    422, "ValidationError")
    assert "forged" not in err["message"]
    Api.error(api.post(base, {"url": "http://127.0.0.1:9/", "headers": {"X-A": "a\r\nB: c"}}),
              422, "ValidationError")

    disabled = Api.data(api.post(base + f"/{hook['id']}/disable"))["webhook"]
    assert disabled["enabled"] is False and disabled["events"] == ["MessageSent"]
    assert Api.data(api.post(base + f"/{hook['id']}/enable"))["webhook"]["enabled"] is True
    Api.data(api.delete(base + f"/{hook['id']}"))
    Api.error(api.get(base + f"/{hook['id']}"), 404, "NotFound")
    Api.error(api.post(base + "/999999/enable"), 404, "NotFound")


def test_private_targets_refused_at_registration(api, tenant, monkeypatch):
    monkeypatch.setenv("WEBHOOKS_ALLOW_PRIVATE_TARGETS", "false")
    base = tenant.server_path + "/webhooks"
    for url in ("http://127.0.0.1:8080/", "http://169.254.169.254/latest/meta-data",
                "http://10.1.2.3/", "https://[::1]/", "http://localhost/"):
        err = Api.error(api.post(base, {"url": url}), 422, "ValidationError")
        assert err["field"] == "url", err


def test_event_is_delivered_signed_with_the_spec_payload(api, tenant):
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url, headers={"X-Secret": "s3cr3t-header"})
        message_id = make_message(tenant)
        event_uuid = emit(message_id, "MessageSent", "Message accepted by mx.example.net")
        [request] = rx.wait_for(1)
        wait_for(lambda: not queue_rows(hook["id"]), message="queue row completed")

    payload = request.json()
    assert payload["event"] == "MessageSent" and payload["uuid"] == event_uuid
    assert isinstance(payload["timestamp"], int) and "test" not in payload
    message = payload["payload"]["message"]
    assert message["id"] == message_id and message["rcpt_to"] == "someone@example.net"
    assert message["mail_from"] == f"app@{tenant.domain}" and message["scope"] == "outgoing"
    assert message["bounce"] is False and message["token"]
    assert payload["payload"]["details"] == "Message accepted by mx.example.net"
    headers = request.headers
    assert headers["x-service-event"] == "MessageSent"
    assert headers["x-service-uuid"] == event_uuid
    assert headers["x-secret"] == "s3cr3t-header"
    assert openssl_verifies(request.body, headers["x-service-signature"])
    assert not openssl_verifies(request.body + b" ", headers["x-service-signature"])

    [entry] = log_rows(hook["id"])
    assert entry.success and entry.status_code == 200 and entry.attempt == 1
    assert entry.event == "MessageSent" and entry.url == rx.url and entry.response_body == "ok"
    logs = api.get(tenant.server_path + f"/webhooks/{hook['id']}/logs").text
    assert "s3cr3t-header" not in logs and json.loads(logs)["data"]["logs"][0]["success"]


def test_unsigned_webhook_and_event_subscription(api, tenant):
    with Receiver([200]) as all_rx, Receiver([200]) as held_rx, Receiver([200]) as off_rx:
        create_webhook(api, tenant, all_rx.url, sign=False)
        create_webhook(api, tenant, held_rx.url, events=["MessageHeld"])
        off = create_webhook(api, tenant, off_rx.url)
        Api.data(api.post(tenant.server_path + f"/webhooks/{off['id']}/disable"))
        message_id = make_message(tenant)
        emit(message_id, "MessageDelayed")
        emit(message_id, "MessageHeld")
        all_rx.wait_for(2)
        held_rx.wait_for(1)
        wait_for(lambda: len(log_rows(off["id"])) == 0 and not queue_rows(off["id"]))
    assert sorted(all_rx.events()) == ["MessageDelayed", "MessageHeld"]
    assert "x-service-signature" not in all_rx.requests[0].headers
    assert held_rx.events() == ["MessageHeld"]
    assert off_rx.requests == []  # a disabled webhook gets nothing


def test_500_then_200_retries_with_the_same_uuid(api, tenant, monkeypatch):
    monkeypatch.setenv("TIME_SCALE", "0.001")  # 1 minute -> 60 ms
    with Receiver([Reply(500, body="busy"), 200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        event_uuid = emit(make_message(tenant), "MessageDeliveryFailed", "550 no such user")
        first, second = rx.wait_for(2)
        wait_for(lambda: not queue_rows(hook["id"]), message="row completed")
    assert first.headers["x-service-uuid"] == second.headers["x-service-uuid"] == event_uuid
    assert first.body == second.body
    failed, ok = log_rows(hook["id"])
    assert (failed.attempt, failed.status_code, failed.success) == (1, 500, False)
    assert failed.response_body == "busy" and failed.will_retry
    assert failed.next_attempt_at - failed.created_at == timedelta(seconds=60 * 0.001)
    assert (ok.attempt, ok.status_code, ok.success, ok.will_retry) == (2, 200, True, False)
    assert len(rx.requests) == 2


def test_never_2xx_is_attempted_exactly_ten_times_with_backoff(api, tenant, monkeypatch):
    scale = 0.0002  # 1, 2, 4 ... 256 minutes -> 12 ms ... 3.1 s
    monkeypatch.setenv("TIME_SCALE", str(scale))
    with Receiver([Reply(503, body="x" * 5000)]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        emit(make_message(tenant), "MessageSent")
        wait_for(lambda: len(log_rows(hook["id"])) >= 10 and not queue_rows(hook["id"]),
                 timeout=60, message="ten attempts and the row dropped")
        entries = log_rows(hook["id"])
    assert [e.attempt for e in entries] == list(range(1, 11))
    assert len(rx.requests) == 10 and len({r.headers["x-service-uuid"] for r in rx.requests}) == 1
    for n, entry in enumerate(entries[:9], start=1):
        assert entry.will_retry and not entry.success and entry.status_code == 503
        expected = timedelta(seconds=60 * 2 ** (n - 1) * scale)
        assert entry.next_attempt_at - entry.created_at == expected, n
        # The next attempt never ran before its scheduled time.
        assert entries[n].created_at >= entry.next_attempt_at
    assert not entries[9].will_retry and entries[9].next_attempt_at is None
    assert len(entries[0].response_body) == 2048  # first 2 KB only


def test_timeout_redirect_and_connection_error_are_failed_attempts(api, tenant, monkeypatch):
    # A timeout with room to spare for a loaded machine: at 0.3 s a quick receiver's answer
    # (the redirect's second) once came too late in CI, an extra failed attempt.
    monkeypatch.setenv("WEBHOOKS_TIMEOUT_SECONDS", "1.0")
    monkeypatch.setenv("TIME_SCALE", "0.001")
    with Receiver([200]) as target, \
            Receiver([Reply(200, delay=3.0), 200]) as slow, \
            Receiver([Reply(302, headers={"Location": target.url}), 204]) as redirect:
        slow_hook = create_webhook(api, tenant, slow.url)
        redirect_hook = create_webhook(api, tenant, redirect.url)
        dead_hook = create_webhook(api, tenant, "http://127.0.0.1:1/nothing-listens")
        emit(make_message(tenant), "MessageSent")
        slow.wait_for(2)
        redirect.wait_for(2)
        wait_for(lambda: not queue_rows(slow_hook["id"]) and not queue_rows(redirect_hook["id"]))
        wait_for(lambda: len(log_rows(dead_hook["id"])) >= 1)
    slow_rows = log_rows(slow_hook["id"])
    timed_out, ok = slow_rows[0], slow_rows[-1]
    assert not timed_out.success and "timed out" in timed_out.error and ok.success
    redirect_rows = log_rows(redirect_hook["id"])
    moved, done = redirect_rows[0], redirect_rows[-1]
    assert moved.status_code == 302 and not moved.success and "redirect" in moved.error
    assert done.status_code == 204 and done.success
    assert target.requests == []  # redirects are not followed
    refused = log_rows(dead_hook["id"])[0]
    assert refused.status_code is None and "connection failed" in refused.error
    pending = Api.data(api.get(tenant.server_path + f"/webhooks/{dead_hook['id']}/requests"))
    assert pending["requests"][0]["attempts"] >= 1
    assert pending["requests"][0]["payload"]["event"] == "MessageSent"
    Api.data(api.delete(tenant.server_path + f"/webhooks/{dead_hook['id']}"))


def test_private_target_refused_again_at_delivery(api, tenant, monkeypatch):
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)  # allowed while registering
        monkeypatch.setenv("WEBHOOKS_ALLOW_PRIVATE_TARGETS", "false")
        emit(make_message(tenant), "MessageSent")
        wait_for(lambda: log_rows(hook["id"]), message="a refused attempt")
        assert rx.requests == []
    entry = log_rows(hook["id"])[0]
    assert not entry.success and entry.error.startswith("refused:") and "loopback" in entry.error
    assert queue_rows(hook["id"])[0].attempts == 1  # kept for a retry: DNS can change
    Api.data(api.post(tenant.server_path + f"/webhooks/{hook['id']}/disable"))
    assert queue_rows(hook["id"]) == []


def test_test_endpoint_delivers_a_signed_sample_and_writes_nothing(api, tenant):
    base = tenant.server_path + "/webhooks"
    with Receiver([Reply(201, body="thanks")]) as rx:
        hook = create_webhook(api, tenant, rx.url, headers={"Authorization": "Bearer tok"})
        result = Api.data(api.post(base + f"/{hook['id']}/test",
                                   {"event": "MessageHeld"}))["result"]
        [request] = rx.requests
    assert result["status_code"] == 201 and result["success"] is True
    assert result["response_body"] == "thanks"
    payload = request.json()
    assert payload["test"] is True and payload["event"] == "MessageHeld"
    assert set(payload["payload"]["message"]) >= {"id", "token", "rcpt_to", "mail_from",
                                                  "scope", "bounce"}
    assert request.headers["authorization"] == "Bearer tok"
    assert request.headers["x-service-uuid"] == payload["uuid"] == result["uuid"]
    assert openssl_verifies(request.body, request.headers["x-service-signature"])
    assert queue_rows(hook["id"]) == [] and log_rows(hook["id"]) == []

    Api.error(api.post(base + f"/{hook['id']}/test", {}), 400, "ParameterMissing")
    err = Api.error(api.post(base + f"/{hook['id']}/test", {"event": "Opened"}),
                    422, "ValidationError")
    assert "MessageSent" in err["message"]
    dead = create_webhook(api, tenant, "http://127.0.0.1:1/")
    result = Api.data(api.post(base + f"/{dead['id']}/test", {"event": "MessageSent"}))["result"]
    assert result["success"] is False and result["status_code"] is None and result["error"]


def test_duplicate_wakeups_send_once(api, tenant):
    with Receiver([Reply(200, delay=0.3)]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        emit(make_message(tenant), "MessageSent")
        with all_tenants() as db:
            row_id = db.scalar(select(WebhookRequest.id).where(
                WebhookRequest.webhook_id == hook["id"]))
        # Three more wake-ups for the same row race the one the stack got.
        threads = [threading.Thread(target=deliver.process, args=(row_id,))
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_for(lambda: not queue_rows(hook["id"]) and log_rows(hook["id"]))
        assert deliver.process(row_id) == "gone"
    assert len(rx.requests) == 1 and len(log_rows(hook["id"])) == 1


def test_early_wakeup_only_reschedules(api, tenant):
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        Api.data(api.post(tenant.server_path + f"/webhooks/{hook['id']}/disable"))
        emit(make_message(tenant), "MessageSent")  # no row: the webhook is disabled
        assert queue_rows(hook["id"]) == []
        Api.data(api.post(tenant.server_path + f"/webhooks/{hook['id']}/enable"))
        message_id = make_message(tenant)
        emit(message_id, "MessageSent")
        wait_for(lambda: rx.requests)
        with all_tenants() as db:
            row = WebhookRequest(server_id=db.get(Webhook, hook["id"]).server_id,
                                 webhook_id=hook["id"], event="MessageSent", uuid="u-early",
                                 body="{}", next_attempt_at=_later(3600))
            db.add(row)
            db.flush()
            row_id = row.id
        assert deliver.process(row_id) == "early"
        [early] = [r for r in queue_rows(hook["id"]) if r.id == row_id]
        assert early.attempts == 0 and early.locked_by is None and len(rx.requests) == 1
        Api.data(api.delete(tenant.server_path + f"/webhooks/{hook['id']}"))


def _later(seconds: float):
    from chalicelib import clock

    return clock.now() + timedelta(seconds=seconds)


def test_events_emitted_by_another_process_reach_the_webhook(api, tenant):
    """The standalone SMTP gateway emits MessageHeld without loading the app or the workers:
    the listener still fans out, and the row written there is delivered by our workers (its
    wake-up was lost with that process; the sweeper finds the row)."""
    import os
    import subprocess
    import sys

    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        message_id = make_message(tenant)
        code = ("from chalicelib.db import session_scope, tenancy\n"
                "from chalicelib.db.models import Message\n"
                "from chalicelib.services.messages import events\n"
                "with session_scope() as db:\n"
                "    tenancy.act(db, tenancy.instance_admin())\n"
                f"    events.emit(db, db.get(Message, {message_id}), 'MessageHeld', 'held')\n")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=60)
        [request] = rx.wait_for(1)
    assert request.json()["event"] == "MessageHeld"
    assert request.json()["payload"]["message"]["id"] == message_id
    wait_for(lambda: not queue_rows(hook["id"]))


def test_retry_schedule_matches_the_spec(monkeypatch):
    monkeypatch.setenv("TIME_SCALE", "1")
    minutes = [deliver.retry_delay_seconds(n) / 60 for n in range(1, 10)]
    assert minutes == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert deliver.retry_delay_seconds(20) == 24 * 3600  # capped
    monkeypatch.setenv("TIME_SCALE", "0.001")
    assert deliver.retry_delay_seconds(3) == 4 * 60 * 0.001


def test_huge_response_body_is_cut_to_2kb(api, tenant):
    with Receiver([Reply(200, body=b"y" * (3 * 1024 * 1024))]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        emit(make_message(tenant), "MessageSent")
        wait_for(lambda: log_rows(hook["id"]), message="the attempt logged")
    [entry] = log_rows(hook["id"])
    assert entry.success and entry.response_body == "y" * 2048 and len(rx.requests) == 1


def test_patch_changes_a_webhook_in_place_and_keeps_masked_secrets(api, tenant):
    base = tenant.server_path + "/webhooks"
    with Receiver([200]) as old_rx, Receiver([200]) as new_rx:
        hook = create_webhook(api, tenant, old_rx.url, events=["MessageSent"],
                              headers={"X-Secret": "keep-me", "X-Old": "drop-me"})
        shown = Api.data(api.get(base + f"/{hook['id']}"))["webhook"]
        # Send the GET's masked headers back with one added and one left out.
        patched = Api.data(api.patch(base + f"/{hook['id']}", {
            "url": new_rx.url, "events": ["MessageHeld"], "sign": False, "name": "Renamed",
            "headers": {"X-Secret": shown["headers"]["X-Secret"], "X-New": "fresh"}}))["webhook"]
        assert patched["id"] == hook["id"] and patched["url"] == new_rx.url
        assert patched["events"] == ["MessageHeld"] and patched["sign"] is False
        assert patched["name"] == "Renamed" and patched["enabled"] is True
        assert patched["headers"] == {"X-Secret": "••••••", "X-New": "••••••"}
        only_name = Api.data(api.patch(base + f"/{hook['id']}", {"name": "Again"}))["webhook"]
        assert {k: v for k, v in only_name.items() if k not in ("name", "updated_at")} == \
            {k: v for k, v in patched.items() if k not in ("name", "updated_at")}

        emit(make_message(tenant), "MessageHeld")
        [request] = new_rx.wait_for(1)
        assert old_rx.requests == []
        assert request.headers["x-secret"] == "keep-me" and request.headers["x-new"] == "fresh"
        assert "x-old" not in request.headers and "x-service-signature" not in request.headers

    Api.error(api.patch(base + f"/{hook['id']}", {"events": ["MessageBounced"]}), 422,
              "ValidationError")
    Api.error(api.patch(base + f"/{hook['id']}", {"url": "ftp://example.com/"}), 422,
              "ValidationError")
    Api.error(api.patch(base + f"/{hook['id']}", {"headers": {"X-Service-UUID": "x"}}), 422,
              "ValidationError")
    Api.error(api.patch(base + "/999999", {"name": "x"}), 404, "NotFound")
    assert Api.data(api.get(base + f"/{hook['id']}"))["webhook"]["events"] == ["MessageHeld"]


def test_changed_headers_reach_the_next_post(api, tenant):
    """A webhook's decrypted headers are kept per process between POSTs: a change of them
    (a new encrypted value) is what the very next POST carries."""
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url, headers={"X-Secret": "first"})
        emit(make_message(tenant), "MessageSent")
        [first] = rx.wait_for(1)
        Api.data(api.patch(tenant.server_path + f"/webhooks/{hook['id']}",
                           {"headers": {"X-Secret": "second", "X-Added": "yes"}}))
        emit(make_message(tenant), "MessageSent")
        second = rx.wait_for(2)[1]
    assert first.headers["x-secret"] == "first" and "x-added" not in first.headers
    assert second.headers["x-secret"] == "second" and second.headers["x-added"] == "yes"
