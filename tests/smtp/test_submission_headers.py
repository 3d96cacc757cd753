"""What the gateway does to the headers of a submitted message before it is stored and
signed: blind copies (Bcc) removed, a Received trace field added."""
from __future__ import annotations

import base64

import pytest

from tests.smtp.support import starttls_client
from tests.sending.test_sending import dns_txt, verify_dkim
from tests.support import Api, unique, wait_for

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")

SERVER = "/api/v2/server"


def header_block(data: bytes) -> bytes:
    return data.split(b"\r\n\r\n", 1)[0]


def stored(api, tenant, to: str) -> tuple[dict, bytes]:
    found = wait_for(lambda: Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                                              params={"query": to}))["messages"],
                     message=f"the message to {to}")
    raw = Api.data(api.get(f"{SERVER}/messages/{found[0]['id']}/raw", server_key=tenant.api_key))
    return found[0], base64.b64decode(raw["raw_base64"])


def blind_mail(tenant, to: str, cc: str, hidden: list[str]) -> bytes:
    # Lower case and folded, two addresses; then a second field, upper case; and a
    # Resent-Bcc: every one of them names blind recipients.
    return (f"From: App <app@{tenant.domain}>\r\nTo: {to}\r\nCc: {cc}\r\n"
            f"bcc: Hidden Person <{hidden[0]}>,\r\n\t{hidden[1]}\r\n"
            f"Subject: {unique('blind')}\r\nBCC: {hidden[2]}\r\n"
            f"Resent-Bcc: {hidden[3]}\r\nMIME-Version: 1.0\r\n\r\n"
            "The Bcc: line of the body stays.\r\n").encode()


def test_bcc_never_reaches_any_copy(stack, api, tenant, mx, monkeypatch):
    to, cc = f"{unique('to')}@recipient.example", f"{unique('cc')}@recipient.example"
    hidden = [f"{unique(f'hidden{i}')}@recipient.example" for i in range(4)]
    everyone = [to, cc, *hidden]
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        assert client.sendmail(f"app@{tenant.domain}", everyone,
                               blind_mail(tenant, to, cc, hidden)) == {}
    for address in everyone:  # the envelope keeps every recipient
        [received] = wait_for(lambda: mx.received_for(address), 20, message=f"mail to {address}")
        head = header_block(received.data).lower()
        assert b"bcc" not in head and not any(h.encode() in received.data for h in hidden)
        assert b"the bcc: line of the body stays." in received.data.lower()
        assert verify_dkim(received.data, dns_txt(api, tenant))  # removed before signing
        message, raw = stored(api, tenant, address)
        assert b"bcc" not in header_block(raw).lower() and message["rcpt_to"] == address

    # The captured-mail inbox shows the same copy.
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    to = f"{unique('cap')}@recipient.example"
    hidden = [f"{unique(f'caphidden{i}')}@recipient.example" for i in range(4)]
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [to, *hidden], blind_mail(tenant, to, to, hidden))
    message, _ = stored(api, tenant, to)
    entry = wait_for(lambda: [c for c in Api.data(api.get(
        f"{SERVER}/captured", server_key=tenant.api_key))["captured"]
        if c["message_id"] == message["id"]], message="the captured copy")[0]
    raw = Api.data(api.get(f"{SERVER}/captured/{entry['id']}/raw", server_key=tenant.api_key))
    assert b"bcc" not in header_block(base64.b64decode(raw["raw_base64"])).lower()
    assert not any(h in raw["raw"] for h in hidden)
