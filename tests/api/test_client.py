"""The tenant client (client/email_service_client.py) against the running stack."""
from __future__ import annotations

import base64
import os
import sys

import pytest

from tests.support import Api

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "client"))

from email_service_client import (  # noqa: E402
    ApiError, EmailServiceClient, attachment, verify_webhook_signature)


@pytest.fixture
def client(stack, tenant):
    return EmailServiceClient(stack.base_url, tenant.api_key)


def test_send_and_read_back(client, tenant):
    result = client.send(from_=f"App <app@{tenant.domain}>", to="ann@example.net",
                         subject="Hello", text_body="Hi Ann", tag="welcome",
                         metadata={"user": 7},
                         attachments=[attachment("a.txt", "text/plain", b"hello")])
    assert result["message_id"] and result["recipients"][0]["rcpt_to"] == "ann@example.net"
    shown = client.message(result["recipients"][0]["id"])
    assert shown  # the message record as the API shows it
    listed = client.messages(tag="welcome")
    assert "messages" in listed and "pagination" in listed


def test_errors_carry_the_stable_code_and_field(client, stack, tenant):
    with pytest.raises(ApiError) as exc:
        client.send(from_="app@not-verified.example", to=["ann@example.net"], text_body="x")
    assert exc.value.code == "ValidationError" and exc.value.status == 422
    with pytest.raises(ApiError) as exc:
        client.send(from_=f"app@{tenant.domain}", to=[], text_body="x")
    assert exc.value.status in (400, 422) and exc.value.field
    with pytest.raises(ApiError) as exc:
        EmailServiceClient(stack.base_url, "wrong-key").send(
            from_=f"app@{tenant.domain}", to="ann@example.net", text_body="x")
    assert (exc.value.code, exc.value.status) == ("Unauthorized", 401)
    with pytest.raises(ApiError) as exc:
        EmailServiceClient("http://127.0.0.1:9", "k", timeout=2).message(1)
    assert exc.value.code == "ConnectionError"


def test_send_with_template_and_batches(client, api, tenant):
    Api.data(api.post("/api/v2/server/templates", {
        "name": "Welcome", "permalink": "welcome", "subject": "Hi {{ name }}",
        "text_body": "Welcome, {{ name }}!"}, server_key=tenant.api_key), 201)
    sent = client.send_with_template("welcome", from_=f"app@{tenant.domain}",
                                     to="bob@example.net", template_model={"name": "Bob"})
    assert sent["message_id"]
    with pytest.raises(ApiError) as exc:
        client.send_with_template("missing", from_=f"app@{tenant.domain}", to="bob@example.net")
    assert exc.value.code == "NotFound"

    batch = client.send_batch([
        {"from": f"app@{tenant.domain}", "to": ["c1@example.net"], "text_body": "one"},
        {"from": "app@not-verified.example", "to": ["c2@example.net"], "text_body": "two"},
    ])
    assert (batch["accepted"], batch["failed"]) == (1, 1)
    assert [m["status"] for m in batch["messages"]] == ["success", "error"]

    templated = client.send_batch_with_template(
        "welcome", [{"to": ["d1@example.net"], "template_model": {"name": "D1"}},
                    {"to": ["d2@example.net"], "template_model": {"name": "D2"}}],
        from_=f"app@{tenant.domain}")
    assert templated["accepted"] == 2


def test_verify_webhook_signature_with_the_installation_key(stack):
    from cryptography.hazmat.primitives import serialization

    from chalicelib.services.security import keys, signing

    key = keys.signing_key()
    body = b'{"event":"MessageSent","uuid":"u-1","payload":{}}'
    signature = signing.sign_body(key, body)
    pem = signing.public_key_pem(key)
    assert verify_webhook_signature(body, signature, pem)
    assert not verify_webhook_signature(body + b" ", signature, pem)
    assert not verify_webhook_signature(body, "not base64!", pem)
    assert not verify_webhook_signature(body, None, pem)
    # The public key as published in the installation's DKIM record works too.
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    record = "v=DKIM1; k=rsa; p=" + base64.b64encode(der).decode()
    assert verify_webhook_signature(body, signature, record)


def test_a_throttled_call_says_when_to_retry(client, tenant, monkeypatch):
    monkeypatch.setenv("API_RATE_LIMIT_PER_SECOND", "0.25")
    monkeypatch.setenv("API_RATE_LIMIT_BURST", "1")
    message = {"from_": f"app@{tenant.domain}", "to": "ann@example.net", "subject": "s",
               "text_body": "t"}
    client.send(**message)
    with pytest.raises(ApiError) as limited:
        client.send(**message)
    assert limited.value.code == "RateLimited" and limited.value.status == 429
    assert limited.value.retry_after == 4


def test_idempotency_keys_scheduled_sends_cancel_and_bulk(client, tenant):
    from datetime import timedelta

    from chalicelib import clock

    send_at = (clock.now() + timedelta(hours=1)).replace(microsecond=0).isoformat() + "Z"
    first = client.send(from_=f"app@{tenant.domain}", to="ann@example.net", text_body="x",
                        send_at=send_at, tag="sched", idempotency_key="order-42")
    again = client.send(from_=f"app@{tenant.domain}", to="ann@example.net", text_body="x",
                        send_at=send_at, tag="sched", idempotency_key="order-42")
    assert again == first and first["recipients"][0]["status"] == "Scheduled"
    with pytest.raises(ApiError) as exc:
        client.send(from_=f"app@{tenant.domain}", to="bob@example.net", text_body="x",
                    idempotency_key="order-42")
    assert exc.value.code == "IdempotencyKeyReused" and exc.value.status == 422
    cancelled = client.cancel(first["recipients"][0]["id"])["message"]
    assert cancelled["status"] == "Cancelled"
    assert client.bulk("cancel", {"tag": "sched"}, dry_run=True)["matched"] == 0
    job = client.bulk("retry")["job"]
    assert client.bulk_job(job["id"])["job"]["action"] == "retry"


def _send_request_fields() -> set[str]:
    """The SendRequest schema's fields as the committed openapi.json declares them."""
    import json

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "openapi.json"), encoding="utf-8") as fh:
        document = json.load(fh)
    body = document["paths"]["/api/v2/server/messages"]["post"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    return set(document["components"]["schemas"][ref]["properties"])


def test_send_takes_every_field_of_the_send_request():
    """send() names only ``from_``, ``to`` and the Idempotency-Key header and passes every
    other SendRequest field through, so no field of openapi.json's SendRequest can be missing
    from it (the client had drifted once, when it listed them: no track_opens/track_clicks)."""
    import inspect

    parameters = inspect.signature(EmailServiceClient.send).parameters
    named = {name.rstrip("_") for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert named - {"idempotency_key"} <= _send_request_fields()
    assert any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def test_send_passes_fields_by_their_json_names(client, tenant):
    result = client.send(from_=f"app@{tenant.domain}", to="ann@example.net", text_body="x",
                         cc=(a for a in ["cc@example.net"]), tag="passed", subject=None)
    assert [r["rcpt_to"] for r in result["recipients"]] == ["ann@example.net", "cc@example.net"]
    shown = client.message(result["recipients"][1]["id"])
    record = shown.get("message", shown)
    assert (record["tag"], record["subject"]) == ("passed", None)


@pytest.mark.parametrize("opens, clicks", [(True, False), (False, True)])
def test_send_passes_the_tracking_choice(client, tenant, opens, clicks):
    result = client.send(from_=f"app@{tenant.domain}", to="ann@example.net",  # HTML: tracked
                         html_body='<p><a href="https://example.org/">x</a></p>',
                         track_opens=opens, track_clicks=clicks)
    shown = client.message(result["recipients"][0]["id"])
    record = shown.get("message", shown)
    assert (record["track_opens"], record["track_clicks"]) == (opens, clicks)
