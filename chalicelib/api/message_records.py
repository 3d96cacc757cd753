"""Records of messages, delivery attempts, events and suppressions in responses, built to
their shapes in chalicelib/shapes (messaging.Message, Delivery, Event; management.Suppression).
``show`` adds ``events`` (the message's history) and ``deliveries`` (messaging.MessageDetail).
"""
from __future__ import annotations

from chalicelib.db.models import Delivery, Message, MessageEvent, Suppression
from chalicelib.shapes import builds
from chalicelib.shapes import management, messaging as shape

SCOPES = ("incoming", "outgoing")


@builds(shape.Message)
def message(m: Message, stream_permalink: str | None = None) -> dict:
    return {
        "id": m.id, "token": m.token, "scope": m.scope, "status": m.status,
        "status_details": m.status_details, "bounce_category": m.bounce_category,
        "rcpt_to": m.rcpt_to, "mail_from": m.mail_from,
        "subject": m.subject, "message_id": m.message_id_header,
        "submission_id": m.submission_id, "tag": m.tag, "metadata": m.metadata_json,
        "stream": stream_permalink, "bounce": m.bounce, "held": m.held, "size": m.size,
        "attempts": m.attempts, "next_attempt_at": m.next_attempt_at,
        "last_attempt_at": m.last_attempt_at, "sent_at": m.sent_at,
        "track_opens": m.track_opens, "track_clicks": m.track_clicks,
        "opens_count": m.opens_count, "clicks_count": m.clicks_count,
        "created_at": m.created_at, "updated_at": m.updated_at,
    }


@builds(shape.Delivery)
def delivery(d: Delivery) -> dict:
    return {"id": d.id, "status": d.status, "stage": d.stage, "host": d.host, "code": d.code,
            "output": d.output, "details": d.details, "category": d.category, "tls": d.tls,
            "duration_ms": d.duration_ms, "timestamp": d.created_at}


@builds(shape.Event)
def event(e: MessageEvent) -> dict:
    return {"event": e.event, "uuid": e.uuid, "details": e.details, "timestamp": e.created_at}


@builds(management.Suppression)
def suppression(s: Suppression) -> dict:
    # ``source`` repeats ``origin`` for clients written before origins had that name.
    return {"id": s.id, "address": s.address, "reason": s.reason, "details": s.details,
            "stream": s.stream.permalink if s.stream_id and s.stream else None,
            "origin": s.origin, "source": s.origin,
            "created_at": s.created_at, "expires_at": s.expires_at}
