"""Record shapes of messages, delivery attempts, events and suppressions in responses.

Message record (list and show): id, token, scope, status, status_details, rcpt_to,
mail_from, subject, message_id (the Message-ID header), submission_id (SendResult.message_id),
tag, metadata, stream, bounce, held, size, attempts, next_attempt_at, last_attempt_at,
sent_at, track_opens, track_clicks, opens_count, clicks_count, created_at, updated_at.
``show`` adds ``events`` (the message's history) and ``deliveries``.
"""
from __future__ import annotations

from chalicelib.db.models import Delivery, Message, MessageEvent, Suppression

OUTGOING_STATUSES = ("Pending", "Sent", "SoftFail", "HardFail", "Held", "Bounced")
INCOMING_STATUSES = ("Pending", "Held", "Delivered", "Failed", "Rejected")
STATUSES = tuple(dict.fromkeys(OUTGOING_STATUSES + INCOMING_STATUSES))
SCOPES = ("incoming", "outgoing")


def message(m: Message, stream_permalink: str | None = None) -> dict:
    return {
        "id": m.id, "token": m.token, "scope": m.scope, "status": m.status,
        "status_details": m.status_details, "rcpt_to": m.rcpt_to, "mail_from": m.mail_from,
        "subject": m.subject, "message_id": m.message_id_header,
        "submission_id": m.submission_id, "tag": m.tag, "metadata": m.metadata_json,
        "stream": stream_permalink, "bounce": m.bounce, "held": m.held, "size": m.size,
        "attempts": m.attempts, "next_attempt_at": m.next_attempt_at,
        "last_attempt_at": m.last_attempt_at, "sent_at": m.sent_at,
        "track_opens": m.track_opens, "track_clicks": m.track_clicks,
        "opens_count": m.opens_count, "clicks_count": m.clicks_count,
        "created_at": m.created_at, "updated_at": m.updated_at,
    }


def delivery(d: Delivery) -> dict:
    return {"id": d.id, "status": d.status, "stage": d.stage, "host": d.host, "code": d.code,
            "output": d.output, "details": d.details, "tls": d.tls,
            "duration_ms": d.duration_ms, "timestamp": d.created_at}


def event(e: MessageEvent) -> dict:
    return {"event": e.event, "uuid": e.uuid, "details": e.details, "timestamp": e.created_at}


def suppression(s: Suppression) -> dict:
    return {"id": s.id, "address": s.address, "reason": s.reason, "source": s.source,
            "created_at": s.created_at, "expires_at": s.expires_at}
