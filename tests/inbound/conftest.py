"""Fixtures of the inbound tests: a message sent and delivered, for a bounce to answer."""
from __future__ import annotations

import pytest

from tests.mx import ScriptedMX
from tests.support import Api, unique, wait_for
from tests.support.sending import SERVER, message


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
