"""Helpers of the webhook tests: register webhooks over HTTP, make messages and emit events
directly (as the sending pipeline does; emit_events with the stack's wake-ups dropped), read
queue and log rows, verify with openssl."""
from __future__ import annotations

import base64
import os
import subprocess
import tempfile
import uuid

import pytest
from sqlalchemy import select

from chalicelib import queues
from chalicelib.db.models import (Message, Organization, Server, WebhookRequest,
                                  WebhookRequestLog)
from chalicelib.services.messages import events
from chalicelib.services.security import keys, signing
from tests.support import Api, all_tenants
from tests.support.delivery import DroppedQueue


def create_webhook(api: Api, tenant, url: str, **fields) -> dict:
    body = {"name": "hook", "url": url, **fields}
    return Api.data(api.post(tenant.server_path + "/webhooks", body), 201)["webhook"]


def server_id(tenant) -> int:
    with all_tenants() as db:
        return db.scalar(select(Server.id).join(Organization)
                         .where(Organization.permalink == tenant.org,
                                Server.permalink == tenant.server))


def make_message(tenant, rcpt: str = "someone@example.net") -> int:
    with all_tenants() as db:
        message = Message(server_id=server_id(tenant), token=uuid.uuid4().hex, scope="outgoing",
                          rcpt_to=rcpt, mail_from=f"app@{tenant.domain}", status="Pending",
                          tag="welcome", metadata_json={"customer": 7})
        db.add(message)
        db.flush()
        return message.id


def emit(message_id: int, event: str, details: str = "details") -> str:
    """Emit like the pipeline does; returns the event's uuid."""
    with all_tenants() as db:
        record = events.emit(db, db.get(Message, message_id), event, details)
        return record.uuid


def queue_rows(webhook_id: int) -> list[WebhookRequest]:
    with all_tenants() as db:
        return list(db.scalars(select(WebhookRequest).where(
            WebhookRequest.webhook_id == webhook_id)))


def log_rows(webhook_id: int) -> list[WebhookRequestLog]:
    with all_tenants() as db:
        return list(db.scalars(select(WebhookRequestLog).where(
            WebhookRequestLog.webhook_id == webhook_id).order_by(WebhookRequestLog.id)))


def openssl_verifies(body: bytes, signature_b64: str) -> bool:
    """Independent check: only the public key, the exact body and the openssl CLI."""
    public_pem = signing.public_key_pem(keys.signing_key())
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: os.path.join(tmp, name) for name in ("pub.pem", "sig.bin", "body.bin")}
        for name, data in (("pub.pem", public_pem), ("sig.bin", base64.b64decode(signature_b64)),
                           ("body.bin", body)):
            with open(paths[name], "wb") as fh:
                fh.write(data)
        result = subprocess.run(["openssl", "dgst", "-sha256", "-verify", paths["pub.pem"],
                                 "-signature", paths["sig.bin"], paths["body.bin"]],
                                capture_output=True, text=True)
    return result.returncode == 0 and "Verified OK" in result.stdout


def emit_events(tenant, hook_id: int, plan: list[tuple[int, str]]) -> list[int]:
    """Emit ``plan`` ((message index, event) in order) with the stack's wake-ups dropped, so
    only the test's batch delivers; returns the queue row ids in emission order."""
    messages: dict[int, int] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(queues, "_port", DroppedQueue())
        for index, event in plan:
            if index not in messages:
                messages[index] = make_message(tenant)
            emit(messages[index], event)
    return sorted(row.id for row in queue_rows(hook_id))
