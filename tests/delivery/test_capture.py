"""DELIVERY_RELAY=capture (what `make run` uses unless told otherwise): nothing leaves the
machine; the message is kept in the captured-mail inbox and as <token>.eml, shown as Sent
with a `capture` attempt, and its events fire as for a real delivery
(tests/messages/test_captured.py reads the inbox)."""
from __future__ import annotations

import base64
import os


from tests.support.sending import dns_txt, verify_dkim
from tests.support import Api, unique, wait_for

SERVER = "/api/v2/server"


def test_captured_mail_is_kept_and_shown_as_delivered(api, tenant, monkeypatch, tmp_path):
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", str(tmp_path / "captured"))
    to = f"{unique('cap')}@recipient.example"
    body = {"from": f"App <app@{tenant.domain}>", "to": [to], "subject": "Captured",
            "text_body": "Kept here"}
    [sent] = Api.data(api.post(f"{SERVER}/messages", body, server_key=tenant.api_key),
                      201)["recipients"]
    message = wait_for(lambda: (m := Api.data(api.get(f"{SERVER}/messages/{sent['id']}",
                                                      server_key=tenant.api_key))["message"])
                       ["status"] == "Sent" and m, 20, message="the message to be Sent")
    assert [e["event"] for e in message["events"]] == ["MessageSent"]
    [attempt] = Api.data(api.get(f"{SERVER}/messages/{sent['id']}/deliveries",
                                 server_key=tenant.api_key))["deliveries"]
    path = tmp_path / "captured" / f"{sent['token']}.eml"
    assert attempt["host"] == "capture" and attempt["code"] == 250
    assert str(path) in attempt["details"]
    kept = path.read_bytes()
    raw = Api.data(api.get(f"{SERVER}/messages/{sent['id']}/raw", server_key=tenant.api_key))
    signed = base64.b64decode(raw["raw_base64"])
    # A mailbox's copy: the envelope on top of the exact signed bytes the API shows.
    assert kept == f"Return-Path: <{sent['token']}@rp.{tenant.domain}>\r\nDelivered-To: {to}\r\n" \
        .encode() + signed
    assert verify_dkim(signed, dns_txt(api, tenant))
    assert not [n for n in os.listdir(tmp_path / "captured") if n.endswith(".tmp")]
    # The file is a convenience; the inbox entry in the database is what the API serves.
    [entry] = Api.data(api.get(f"{SERVER}/captured", server_key=tenant.api_key))["captured"]
    assert (entry["message_id"], entry["reason"]) == (sent["id"], "capture")


def test_capture_that_cannot_write_is_a_retry_not_a_loss(api, tenant, monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the capture directory should be")
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", str(blocker / "captured"))
    body = {"from": f"App <app@{tenant.domain}>", "to": [f"{unique('c')}@recipient.example"],
            "text_body": "x"}
    [sent] = Api.data(api.post(f"{SERVER}/messages", body, server_key=tenant.api_key),
                      201)["recipients"]
    message = wait_for(lambda: (m := Api.data(api.get(f"{SERVER}/messages/{sent['id']}",
                                                      server_key=tenant.api_key))["message"])
                       ["status"] == "SoftFail" and m, 20, message="a soft failure")
    assert "could not capture" in message["status_details"]
