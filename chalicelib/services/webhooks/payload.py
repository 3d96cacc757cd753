"""A webhook's notification: the signed JSON body of one message event, and the fan-out of an
event into one queued request per subscribed webhook (an ORM listener of the events service,
and the same rule as one SQL statement for writers that use core statements).

Importing this module registers ``fan_out`` as an events listener (the events service loads
it before its first event), so every process that records events turns them into requests.
"""
from __future__ import annotations

import calendar
import json
from datetime import datetime

from sqlalchemy import Integer, exists, insert, literal, select, text
from sqlalchemy.orm import Session

from chalicelib import clock, queues
from chalicelib.db.models import Message, MessageEvent, Webhook, WebhookRequest
from chalicelib.services.messages import events


def message_fields(message: Message) -> dict:
    """``payload.message`` of a notification: the one list of its fields (the test send's
    sample goes through it too; docs/api.md, Webhooks, names them)."""
    return {"id": message.id, "token": message.token, "rcpt_to": message.rcpt_to,
            "mail_from": message.mail_from, "scope": message.scope, "bounce": message.bounce,
            "tag": message.tag, "metadata": message.metadata_json}


def _unix(moment: datetime) -> int:
    return calendar.timegm(moment.timetuple())


def build_body(event: str, uuid: str, timestamp: int, message: dict, details: str | None,
               *, test: bool = False) -> str:
    """The JSON text of one notification: serialized once, stored, signed and sent as is."""
    payload: dict = {"event": event, "timestamp": timestamp, "uuid": uuid}
    if test:
        payload["test"] = True
    payload["payload"] = {"message": message, "details": details or ""}
    return json.dumps(payload, separators=(",", ":"))


def subscribed(webhook: Webhook, event: str) -> bool:
    return not webhook.events or event in webhook.events


def fan_out(db: Session, message: Message, record: MessageEvent) -> list[WebhookRequest]:
    """Events listener: one queue row per enabled webhook of the server subscribed to the
    event, committed with the event itself. The event's uuid is the idempotency key."""
    hooks = [w for w in db.scalars(select(Webhook).where(Webhook.server_id == message.server_id,
                                                         Webhook.enabled.is_(True)))
             if subscribed(w, record.event)]
    if not hooks:
        return []
    body = build_body(record.event, record.uuid, _unix(record.created_at or clock.now()),
                      message_fields(message), record.details)
    now = clock.now()
    rows = [WebhookRequest(server_id=message.server_id, webhook_id=w.id, message_id=message.id,
                           event=record.event, uuid=record.uuid, body=body, attempts=0,
                           next_attempt_at=now, created_at=now) for w in hooks]
    db.add_all(rows)
    db.flush()
    for row in rows:
        queues.enqueue_after_commit(db, queues.WEBHOOKS, row.id)
    return rows


events.add_listener(fan_out)

# Subscription rule of ``subscribed`` in SQL (events is a JSON array; [] means every event).
SUBSCRIBED_SQL = {
    "postgresql": "(json_array_length(webhooks.events) = 0 OR EXISTS (SELECT 1 FROM "
                  "json_array_elements_text(webhooks.events) AS wh_e(v) WHERE wh_e.v = :wh_event))",
    "sqlite": "(json_array_length(webhooks.events) = 0 OR EXISTS (SELECT 1 FROM "
              "json_each(webhooks.events) WHERE json_each.value = :wh_event))",
}


def fan_out_statement(dialect: str, *, server_id, message_id, event, uuid, body, now,
                      only_if=None):
    """``fan_out`` as ONE ``INSERT ... SELECT FROM webhooks ... RETURNING id`` for writers that
    record events with core statements (the delivery worker): every argument is a SQL
    expression (bind parameters, a CTE's column); the subscription rule reads ``:wh_event``.
    ``only_if``: a CTE that must hold a row for anything to be written. The caller enqueues
    the returned ids after its commit."""
    table, hooks = WebhookRequest.__table__, Webhook.__table__
    rows = select(hooks.c.server_id, hooks.c.id, message_id, event, uuid, body,
                  literal(0, Integer), now, now) \
        .where(hooks.c.server_id == server_id, hooks.c.enabled.is_(True),
               text(SUBSCRIBED_SQL[dialect]))
    if only_if is not None:
        rows = rows.where(exists(select(only_if.c.id)))
    return insert(table).from_select(
        ["server_id", "webhook_id", "message_id", "event", "uuid", "body", "attempts",
         "next_attempt_at", "created_at"], rows).returning(table.c.id)
