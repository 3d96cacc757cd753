"""Helpers for tests that send through the HTTP API and watch the message: a recipient address,
a send, a message's status, the sending domain's DKIM record and a DKIM check against it, the
server's settings, times as the API writes them."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dkim

from chalicelib import clock
from tests.support import Api, unique, wait_for

SERVER = "/api/v2/server"


def rcpt(name: str = "r") -> str:
    return f"{unique(name)}@recipient.example"


def send(api, tenant, **fields):
    body = {"from": f"Sender <app@{tenant.domain}>", "to": [rcpt()], "subject": "Hello",
            "text_body": "Hi there", **fields}
    return api.post(f"{SERVER}/messages", body, server_key=tenant.api_key)


def sent_ok(api, tenant, **fields) -> dict:
    return Api.data(send(api, tenant, **fields), 201)


def message(api, tenant, message_id: int) -> dict:
    return Api.data(api.get(f"{SERVER}/messages/{message_id}", server_key=tenant.api_key))["message"]


def wait_status(api, tenant, message_id: int, status: str, timeout: float = 20) -> dict:
    return wait_for(lambda: (m := message(api, tenant, message_id))["status"] == status and m,
                    timeout, message=f"message {message_id} to be {status}")


def dns_txt(api, tenant) -> dict:
    domain = Api.data(api.get(f"{tenant.server_path}/domains/{tenant.domain}"))["domain"]
    record = domain["dns_records"]["dkim"]
    return {record["name"]: record["value"]}


def verify_dkim(data: bytes, records: dict) -> bool:
    def dnsfunc(name, timeout=5):
        name = name.decode() if isinstance(name, bytes) else name
        value = records.get(name.rstrip("."))
        return value.encode() if value else None

    return bool(dkim.verify(data, dnsfunc=dnsfunc))


def set_server(api, tenant, **changes) -> dict:
    return Api.data(api.patch(tenant.server_path, changes))["server"]


def rfc3339(moment: datetime) -> str:
    return moment.replace(tzinfo=timezone.utc).isoformat().replace("+00:00", "Z")


def later(**delta) -> str:
    return rfc3339(clock.now() + timedelta(**delta))
