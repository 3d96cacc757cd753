"""Records of mail in answers: messages, delivery attempts, events, bounces, opens and clicks,
inbound messages, captured-mail entries, streams, templates and mail frames (shapes in chalicelib/response_shapes/messaging.py). A
message's ``show`` adds ``events`` (its history) and ``deliveries`` (MessageDetail).
"""
from __future__ import annotations

import base64

from sqlalchemy.orm import Session

from chalicelib.config import get_settings
from chalicelib.services import failures
from chalicelib.db.models import (CapturedMessage, ClickEvent, Credential, Delivery, MailFrame,
                                  Message, MessageEvent, OpenEvent, Route, Server, Stream,
                                  Template)
from chalicelib.services.mailframes import frames
from chalicelib.services.messages import search
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import messaging as shape

SCOPES = ("incoming", "outgoing")


@builds(shape.Message)
def message(m: Message, stream_permalink: str | None = None) -> dict:
    return {
        **{name: getattr(m, name) for name in shape.KEPT_SEND_FIELDS},
        "id": m.id, "token": m.token, "scope": m.scope, "status": m.status,
        "status_details": m.status_details, "bounce_category": m.bounce_category,
        "bounce_reason": m.bounce_reason,
        "rcpt_to": m.rcpt_to, "mail_from": m.mail_from,
        "subject": m.subject, "message_id": m.message_id_header,
        "submission_id": m.submission_id, "metadata": m.metadata_json,
        "stream": stream_permalink, "bounce": m.bounce, "held": m.held,
        "return_path": m.return_path, "size": m.size,
        "attempts": m.attempts, "next_attempt_at": m.next_attempt_at,
        "last_attempt_at": m.last_attempt_at, "sent_at": m.sent_at,
        "track_opens": m.track_opens, "track_clicks": m.track_clicks,
        "opens_count": m.opens_count, "clicks_count": m.clicks_count,
        "created_at": m.created_at, "updated_at": m.updated_at,
        "content_expired_at": getattr(m, "content_expired_at", None),
    }


@builds(shape.CapturedMessage)
def captured(entry: CapturedMessage, m: Message) -> dict:
    return {"id": entry.id, "message_id": m.id, "reason": entry.reason,
            "mail_from": m.mail_from, "rcpt_to": m.rcpt_to, "subject": m.subject,
            "status": m.status, "size": m.size, "created_at": entry.created_at}


@builds(shape.Raw)
def raw(message_id: int, data: bytes, signed: bool) -> dict:
    return {"message_id": message_id, "signed": signed, "size": len(data),
            "raw": data.decode("utf-8", "replace"),
            "raw_base64": base64.b64encode(data).decode("ascii")}


@builds(shape.AttachmentContent)
def attachment(description: dict, data: bytes) -> dict:
    return {**description, "content_base64": base64.b64encode(data).decode("ascii")}


@builds(shape.Delivery)
def delivery(d: Delivery) -> dict:
    return {"id": d.id, "status": d.status, "stage": d.stage, "host": d.host, "code": d.code,
            "output": d.output, "details": d.details, "category": d.category,
            "reason": d.reason, "about_recipient": failures.about_recipient(d.reason),
            "tls": d.tls,
            "tls_verified": d.tls_verified, "mta_sts": d.mta_sts,
            "source_address": d.source_address, "duration_ms": d.duration_ms,
            "timestamp": d.created_at}


@builds(shape.Event)
def event(e: MessageEvent) -> dict:
    return {"event": e.event, "uuid": e.uuid, "details": e.details, "timestamp": e.created_at}


@builds(shape.Bounce)
def bounce(db: Session, bounce: Message) -> dict:
    report = (bounce.metadata_json or {}).get("dsn") or {}
    original = db.get(Message, bounce.original_message_id) if bounce.original_message_id else None
    return {"id": bounce.id, "token": bounce.token, "scope": bounce.scope, "bounce": True,
            "rcpt_to": bounce.rcpt_to, "mail_from": bounce.mail_from, "subject": bounce.subject,
            "size": bounce.size, "status_code": report.get("status"),
            "action": report.get("action"), "bounce_type": report.get("type"),
            "category": report.get("category"), "reason": report.get("reason"),
            "about_recipient": failures.about_recipient(report.get("reason")),
            "suppressed": bool(report.get("suppressed")),
            "diagnostic": report.get("diagnostic"),
            "final_recipient": report.get("final_recipient"),
            "remote_mta": report.get("remote_mta"), "reporting_mta": report.get("reporting_mta"),
            "original_message_id": bounce.original_message_id,
            "original_message": None if original is None else {
                "id": original.id, "token": original.token, "rcpt_to": original.rcpt_to,
                "mail_from": original.mail_from, "subject": original.subject,
                "status": original.status},
            "complaint": None if report.get("type") not in ("complaint", "auth_failure") else {
                k: report.get(k) for k in (
                    "feedback_type", "user_agent", "original_mail_from", "original_rcpt_to",
                    "arrival_date", "source_ip", "reported_domain")},
            "created_at": bounce.created_at}


@builds(shape.Open)
def open_event(event: OpenEvent) -> dict:
    return {"id": event.id, "message_id": event.message_id, "ip_address": event.ip_address,
            "user_agent": event.user_agent, "likely_machine": event.likely_machine,
            "detection": event.detection, "created_at": event.created_at}


@builds(shape.Click)
def click_event(event: ClickEvent) -> dict:
    return {**open_event(event), "url": event.url, "link_id": event.link_id}


@builds(shape.InboundMessage)
def inbound_message(db: Session, message: Message, detail: bool = False) -> dict:
    route = db.get(Route, message.route_id) if message.route_id else None
    data = {"id": message.id, "token": message.token, "scope": message.scope,
            "bounce": message.bounce, "rcpt_to": message.rcpt_to,
            "mail_from": message.mail_from, "subject": message.subject,
            "message_id": message.message_id_header, "size": message.size,
            "status": message.status, "status_details": message.status_details,
            "held": message.held, "attempts": message.attempts,
            "next_attempt_at": message.next_attempt_at,
            "last_attempt_at": message.last_attempt_at,
            "route": None if route is None else {"id": route.id, "name": route.name,
                                                 "mode": route.mode},
            "created_at": message.created_at,
            "content_expired_at": message.content_expired_at}
    if detail:
        attempts = search.deliveries(db, message)
        data["deliveries"] = [{"id": d.id, "status": d.status, "target": d.host, "code": d.code,
                               "output": d.output, "details": d.details,
                               "duration_ms": d.duration_ms, "created_at": d.created_at}
                              for d in attempts]
    return data


@builds(shape.Stream)
def stream(stream: Stream) -> dict:
    return {"id": stream.id, "name": stream.name, "permalink": stream.permalink,
            "stream_type": stream.stream_type, "description": stream.description,
            "list_unsubscribe": stream.stream_type == "broadcast" or stream.list_unsubscribe,
            "default": stream.is_default, "archived": stream.archived_at is not None,
            "archived_at": stream.archived_at, "created_at": stream.created_at,
            "updated_at": stream.updated_at}


@builds(shape.Template)
def template(template: Template, *, bodies: bool = True) -> dict:
    """The template as shown; list answers leave the bodies out (``bodies=False``) so a page
    of large templates stays small."""
    data = {"id": template.id, "name": template.name, "permalink": template.permalink,
            "subject": template.subject, "archived": template.archived_at is not None,
            "archived_at": template.archived_at, "created_at": template.created_at,
            "updated_at": template.updated_at}
    if bodies:
        data["html_body"] = template.html_body
        data["text_body"] = template.text_body
    return data


@builds(shape.MailFrame)
def mail_frame(frame: MailFrame) -> dict:
    path = frames.path(frame)
    return {"kind": frame.kind, "id": frame.ref, "path": path,
            "url": get_settings().effective_public_url + path, "expires_at": frame.expires_at}


@builds(shape.ServerInfo)
def server_info(srv: Server, credential: Credential | None) -> dict:
    """The calling server; ``credential`` is None for a signed-in user (X-Server)."""
    return {"id": srv.id, "uuid": srv.uuid, "name": srv.name, "permalink": srv.permalink,
            "mode": srv.mode, "suspended": srv.suspended,
            "suspension_reason": srv.suspension_reason,
            "organization": srv.organization.permalink,
            "credential": {"id": credential.id, "name": credential.name} if credential else None}
