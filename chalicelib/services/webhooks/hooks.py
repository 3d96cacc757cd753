"""Webhooks of a server: validating and managing them, and a test send (a sample
notification delivered now, exactly as a real one). Their notifications are built and fanned
out in ``payload.py`` and delivered by ``deliver.py``."""
from __future__ import annotations

import json
import re
import uuid as uuid_module
from urllib.parse import urlsplit

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.models import Message, Server, Webhook, WebhookRequest
from chalicelib.db import claims
from chalicelib.services.messages import events
from chalicelib.services.webhooks import payload
from chalicelib.services.security import keys, url_safety
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import management as shape

EVENTS = events.EVENTS
MASK = "••••••"
MAX_HEADERS = 20
MAX_HEADER_VALUE = 4096
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
# The one rule for the headers a webhook's custom headers may not replace: every
# ``X-Service-*`` (ours: Event, UUID, Signature, Signature-Key and any we add later) and the
# ones HTTP owns. docs/api.md states it (tests/webhooks/test_reserved_headers.py keeps the two
# in step).
RESERVED_HEADER_PREFIX = "X-Service-"
HTTP_OWNED_HEADERS = ("Host", "Content-Type", "Content-Length", "Transfer-Encoding",
                      "Connection", "User-Agent")
_HTTP_OWNED = frozenset(h.lower() for h in HTTP_OWNED_HEADERS)


def reserved_header(name: str) -> bool:
    """True for a header the service sets or HTTP owns (case-insensitive)."""
    lower = name.lower()
    return lower.startswith(RESERVED_HEADER_PREFIX.lower()) or lower in _HTTP_OWNED


# --------------------------------------------------------------------------- validation

def validate_events(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in EVENTS]
    if unknown:
        raise errors.ValidationError(
            f"events: unknown event name(s) {', '.join(map(repr, unknown))}; valid events are "
            f"{', '.join(EVENTS)} (an empty list subscribes to all)", field="events")
    return list(dict.fromkeys(names))


def validate_url(url: str) -> str:
    url = url.strip()
    try:
        url_safety.check_url(url, allow_private=get_settings().webhooks_allow_private_targets)
    except url_safety.UnsafeURL as exc:
        raise errors.ValidationError(f"url: {exc}", field="url") from None
    return url


def validate_headers(headers: dict[str, str]) -> dict[str, str]:
    if len(headers) > MAX_HEADERS:
        raise errors.ValidationError(f"headers: at most {MAX_HEADERS} headers", field="headers")
    for name, value in headers.items():
        if not _TOKEN.match(name):
            raise errors.ValidationError(f"headers: {name!r} is not a valid header name",
                                         field="headers")
        if reserved_header(name):
            raise errors.ValidationError(
                f"headers: {name} is set by the service and cannot be configured (reserved: "
                f"{RESERVED_HEADER_PREFIX}*, {', '.join(HTTP_OWNED_HEADERS)})",
                field="headers")
        # The value itself is never echoed: it is a secret.
        if any(c in value for c in "\r\n\0") or len(value) > MAX_HEADER_VALUE:
            raise errors.ValidationError(
                f"headers: the value of {name} must be one line of at most "
                f"{MAX_HEADER_VALUE} characters", field="headers")
    return dict(headers)


# --------------------------------------------------------------------------- management

def create(db: Session, server: Server, *, name: str | None, url: str, events_: list[str],
           sign: bool = True, headers: dict[str, str] | None = None,
           enabled: bool = True) -> Webhook:
    url = validate_url(url)
    webhook = Webhook(server_id=server.id, name=(name or urlsplit(url).hostname or url)[:255],
                      url=url, events=validate_events(events_), sign=sign, enabled=enabled,
                      headers_encrypted=_encrypt_headers(validate_headers(headers or {})))
    db.add(webhook)
    db.flush()
    return webhook


def update(db: Session, webhook: Webhook, changes: dict) -> Webhook:
    """Change the given fields (validated as at creation). Requests already queued keep the
    body they were built with; they go to the new URL with the new headers and signing."""
    if changes.get("url") is not None:
        webhook.url = validate_url(changes["url"])
    if changes.get("name") is not None:
        webhook.name = changes["name"][:255]
    if changes.get("events") is not None:
        webhook.events = validate_events(changes["events"])
    if changes.get("sign") is not None:
        webhook.sign = changes["sign"]
    if changes.get("headers") is not None:
        current = custom_headers(webhook)
        headers = {name: current[name] if value == MASK and name in current else value
                   for name, value in changes["headers"].items()}
        webhook.headers_encrypted = _encrypt_headers(validate_headers(headers))
    db.flush()
    return webhook


def find(db: Session, server: Server, webhook_id: int) -> Webhook:
    webhook = db.scalar(select(Webhook).where(Webhook.server_id == server.id,
                                              Webhook.id == webhook_id))
    if webhook is None:
        raise errors.NotFound(f"no webhook {webhook_id} on server {server.permalink!r}")
    return webhook


def set_enabled(db: Session, webhook: Webhook, enabled: bool) -> Webhook:
    webhook.enabled = enabled
    if not enabled:
        # Disabled means nothing is delivered: pending requests are dropped now. Rows being
        # delivered right now are skipped rather than waited for; a worker only claims rows
        # of enabled webhooks and drops the others it finds.
        free = (select(WebhookRequest.id)
                .where(WebhookRequest.webhook_id == webhook.id, claims.unclaimed(WebhookRequest))
                .with_for_update(skip_locked=True))
        db.execute(delete(WebhookRequest).where(WebhookRequest.id.in_(free))
                   .execution_options(synchronize_session=False))
    db.flush()
    return webhook


def remove(db: Session, webhook: Webhook) -> None:
    db.execute(delete(WebhookRequest).where(WebhookRequest.webhook_id == webhook.id))
    db.delete(webhook)
    db.flush()


def _encrypt_headers(headers: dict[str, str]) -> str | None:
    if not headers:
        return None
    return keys.secret_box().encrypt(json.dumps(headers).encode("utf-8"))


def custom_headers(webhook: Webhook) -> dict[str, str]:
    if not webhook.headers_encrypted:
        return {}
    return json.loads(keys.secret_box().decrypt_text(webhook.headers_encrypted))


def masked_headers(webhook: Webhook) -> dict[str, str]:
    return {name: MASK for name in custom_headers(webhook)}


# --------------------------------------------------------------------------- test sends

@builds(shape.WebhookTestResult)
def send_test(db: Session, webhook: Webhook, server: Server, event: str) -> dict:
    """Deliver one sample notification now, exactly as a real one (headers, signature), marked
    ``test: true``. Writes nothing: no queue row, no log row."""
    url, sign, custom = webhook.url, webhook.sign, custom_headers(webhook)
    # End the read transaction before a POST that may take WEBHOOKS_TIMEOUT_SECONDS (on SQLite
    # it would hold the database's write lock all that time).
    db.commit()
    if event not in EVENTS:
        raise errors.ValidationError(
            f"event: unknown event {event!r}; valid events are {', '.join(EVENTS)}",
            field="event")
    event_uuid = str(uuid_module.uuid4())
    # A message never stored, through the one list of a notification's message fields.
    sample = payload.message_fields(Message(
        id=0, token="sampletoken0000", rcpt_to="recipient@example.com",
        mail_from=f"sender@{server.permalink}.example.com", scope="outgoing", bounce=False,
        tag=None, metadata_json=None))
    body = payload.build_body(event, event_uuid, int(clock.timestamp()), sample,
                      f"Test notification for {event}", test=True).encode("utf-8")
    from chalicelib.services.webhooks import deliver

    headers = deliver.build_headers(event, event_uuid, body, sign, custom)
    outcome = deliver.attempt(url, body, headers)
    return {"event": event, "uuid": event_uuid, "url": url,
            "status_code": outcome.status_code, "success": outcome.success,
            "response_body": outcome.response_body, "error": outcome.error,
            "duration_ms": outcome.duration_ms}
