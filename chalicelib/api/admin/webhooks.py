"""Management: a server's webhooks, their pending queue and their attempt log."""
from __future__ import annotations

import json

from chalice import Blueprint
from sqlalchemy import select

from chalicelib import shapes
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.schemas.webhooks import WebhookIn, WebhookTestIn, WebhookUpdate
from chalicelib.db.models import Webhook, WebhookRequest, WebhookRequestLog
from chalicelib.services.organizations import lookup
from chalicelib.services.webhooks import hooks as service  # also registers the events listener
from chalicelib.shapes import management as shape
from chalicelib.shapes import builds

bp = Blueprint(__name__)
BASE = "/organizations/{org}/servers/{server}/webhooks"


@builds(shape.Webhook)
def webhook_record(webhook: Webhook) -> dict:
    return {"id": webhook.id, "uuid": webhook.uuid, "name": webhook.name, "url": webhook.url,
            "events": list(webhook.events or []), "sign": webhook.sign,
            "enabled": webhook.enabled, "headers": service.masked_headers(webhook),
            "last_used_at": webhook.last_used_at, "created_at": webhook.created_at,
            "updated_at": webhook.updated_at}


@builds(shape.WebhookRequest)
def request_record(row: WebhookRequest) -> dict:
    return {"id": row.id, "event": row.event, "uuid": row.uuid, "message_id": row.message_id,
            "attempts": row.attempts, "next_attempt_at": row.next_attempt_at,
            "in_progress": row.locked_by is not None, "created_at": row.created_at,
            "payload": json.loads(row.body)}


@builds(shape.WebhookLog)
def log_record(entry: WebhookRequestLog) -> dict:
    return {"id": entry.id, "event": entry.event, "uuid": entry.uuid, "url": entry.url,
            "attempt": entry.attempt, "status_code": entry.status_code,
            "success": entry.success, "response_body": entry.response_body,
            "error": entry.error, "duration_ms": entry.duration_ms,
            "will_retry": entry.will_retry, "next_attempt_at": entry.next_attempt_at,
            "created_at": entry.created_at}


def _webhook(call: Call, org: str, server: str, id: int, action: str):
    srv = lookup.server(call.db, call.principal, org, server, action)
    return srv, service.find(call.db, srv, id)


@endpoint(bp, BASE, "GET", auth=ADMIN, query=q.PAGINATION,
          response=shapes.page("webhooks", shape.Webhook))
def list_webhooks(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "webhooks.read")
    stmt = select(Webhook).where(Webhook.server_id == srv.id).order_by(Webhook.id)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"webhooks": [webhook_record(w) for w in rows], "pagination": pagination}


@endpoint(bp, BASE, "POST", auth=ADMIN, body=WebhookIn, status=201,
          response=shapes.one("webhook", shape.Webhook))
def create_webhook(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "webhooks.manage")
    body = call.body
    webhook = service.create(call.db, srv, name=body.name, url=body.url, events_=body.events,
                             sign=body.sign, headers=body.headers, enabled=body.enabled)
    return {"webhook": webhook_record(webhook)}


@endpoint(bp, BASE + "/{id}", "GET", auth=ADMIN,
          response=shapes.one("webhook", shape.Webhook))
def show_webhook(call: Call, org: str, server: str, id: int):
    return {"webhook": webhook_record(_webhook(call, org, server, id, "webhooks.read")[1])}


@endpoint(bp, BASE + "/{id}", "PATCH", auth=ADMIN, body=WebhookUpdate,
          response=shapes.one("webhook", shape.Webhook))
def update_webhook(call: Call, org: str, server: str, id: int):
    """Change a webhook in place (ours; the spec has none): its log and queue are kept."""
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    changes = call.body.model_dump(exclude_unset=True)
    return {"webhook": webhook_record(service.update(call.db, webhook, changes))}


@endpoint(bp, BASE + "/{id}", "DELETE", auth=ADMIN,
          response=shapes.deleted("webhook", shape.Webhook))
def delete_webhook(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    record = webhook_record(webhook)
    service.remove(call.db, webhook)
    return {"webhook": record, "deleted": True}


@endpoint(bp, BASE + "/{id}/enable", "POST", auth=ADMIN,
          response=shapes.one("webhook", shape.Webhook))
def enable_webhook(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    return {"webhook": webhook_record(service.set_enabled(call.db, webhook, True))}


@endpoint(bp, BASE + "/{id}/disable", "POST", auth=ADMIN,
          response=shapes.one("webhook", shape.Webhook))
def disable_webhook(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    return {"webhook": webhook_record(service.set_enabled(call.db, webhook, False))}


@endpoint(bp, BASE + "/{id}/test", "POST", auth=ADMIN, body=WebhookTestIn,
          response=shape.WebhookTest)
def test_webhook(call: Call, org: str, server: str, id: int):
    srv, webhook = _webhook(call, org, server, id, "webhooks.manage")
    return {"result": service.send_test(call.db, webhook, srv, call.body.event)}


@endpoint(bp, BASE + "/{id}/requests", "GET", auth=ADMIN, query=q.PAGINATION,
          response=shapes.page("requests", shape.WebhookRequest))
def list_requests(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.read")[1]
    stmt = (select(WebhookRequest).where(WebhookRequest.webhook_id == webhook.id)
            .order_by(WebhookRequest.next_attempt_at, WebhookRequest.id))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"requests": [request_record(r) for r in rows], "pagination": pagination}


@endpoint(bp, BASE + "/{id}/logs", "GET", auth=ADMIN, query=q.PAGINATION,
          response=shapes.page("logs", shape.WebhookLog))
def list_logs(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.read")[1]
    stmt = (select(WebhookRequestLog).where(WebhookRequestLog.webhook_id == webhook.id)
            .order_by(WebhookRequestLog.id.desc()))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"logs": [log_record(e) for e in rows], "pagination": pagination}
