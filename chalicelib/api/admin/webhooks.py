"""Management: a server's webhooks, their pending queue and their attempt log."""
from __future__ import annotations


from chalice import Blueprint
from sqlalchemy import select

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies.webhooks import WebhookIn, WebhookTestIn, WebhookUpdate
from chalicelib.api.response_builders import management
from chalicelib.db.models import Webhook, WebhookRequest, WebhookRequestLog
from chalicelib.services.organizations import lookup
from chalicelib.services.webhooks import hooks as service  # also registers the events listener
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)
BASE = "/organizations/{org}/servers/{server}/webhooks"


def _webhook(call: Call, org: str, server: str, id: int, action: str):
    srv = lookup.server(call.db, call.principal, org, server, action)
    return srv, service.find(call.db, srv, id)


@endpoint(bp, BASE, "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("webhooks", shape.Webhook))
def list_webhooks(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "webhooks.read")
    stmt = select(Webhook).where(Webhook.server_id == srv.id).order_by(Webhook.id)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"webhooks": [management.webhook(w) for w in rows], "pagination": pagination}


@endpoint(bp, BASE, "POST", auth=ADMIN, body=WebhookIn, status=201,
          response=response_shapes.one("webhook", shape.Webhook))
def create_webhook(call: Call, org: str, server: str):
    srv = lookup.server(call.db, call.principal, org, server, "webhooks.manage")
    body = call.body
    webhook = service.create(call.db, srv, name=body.name, url=body.url, events_=body.events,
                             sign=body.sign, headers=body.headers, enabled=body.enabled)
    return {"webhook": management.webhook(webhook)}


@endpoint(bp, BASE + "/{id}", "GET", auth=ADMIN,
          response=response_shapes.one("webhook", shape.Webhook))
def show_webhook(call: Call, org: str, server: str, id: int):
    return {"webhook": management.webhook(_webhook(call, org, server, id, "webhooks.read")[1])}


@endpoint(bp, BASE + "/{id}", "PATCH", auth=ADMIN, body=WebhookUpdate,
          response=response_shapes.one("webhook", shape.Webhook))
def update_webhook(call: Call, org: str, server: str, id: int):
    """Change a webhook in place (ours; the spec has none): its log and queue are kept."""
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    changes = call.body.model_dump(exclude_unset=True)
    return {"webhook": management.webhook(service.update(call.db, webhook, changes))}


@endpoint(bp, BASE + "/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("webhook", shape.Webhook))
def delete_webhook(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    record = management.webhook(webhook)
    service.remove(call.db, webhook)
    return {"webhook": record, "deleted": True}


@endpoint(bp, BASE + "/{id}/enable", "POST", auth=ADMIN,
          response=response_shapes.one("webhook", shape.Webhook))
def enable_webhook(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    return {"webhook": management.webhook(service.set_enabled(call.db, webhook, True))}


@endpoint(bp, BASE + "/{id}/disable", "POST", auth=ADMIN,
          response=response_shapes.one("webhook", shape.Webhook))
def disable_webhook(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.manage")[1]
    return {"webhook": management.webhook(service.set_enabled(call.db, webhook, False))}


@endpoint(bp, BASE + "/{id}/test", "POST", auth=ADMIN, body=WebhookTestIn,
          response=shape.WebhookTest)
def test_webhook(call: Call, org: str, server: str, id: int):
    srv, webhook = _webhook(call, org, server, id, "webhooks.manage")
    return {"result": service.send_test(call.db, webhook, srv, call.body.event)}


@endpoint(bp, BASE + "/{id}/requests", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("requests", shape.WebhookRequest))
def list_requests(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.read")[1]
    stmt = (select(WebhookRequest).where(WebhookRequest.webhook_id == webhook.id)
            .order_by(WebhookRequest.next_attempt_at, WebhookRequest.id))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"requests": [management.webhook_request(r) for r in rows], "pagination": pagination}


@endpoint(bp, BASE + "/{id}/logs", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("logs", shape.WebhookLog))
def list_logs(call: Call, org: str, server: str, id: int):
    webhook = _webhook(call, org, server, id, "webhooks.read")[1]
    stmt = (select(WebhookRequestLog).where(WebhookRequestLog.webhook_id == webhook.id)
            .order_by(WebhookRequestLog.id.desc()))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"logs": [management.webhook_log(e) for e in rows], "pagination": pagination}
