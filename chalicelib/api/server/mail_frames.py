"""Messaging surface: mail frames, a mail's HTML at a short-lived URL of its own to show in a
sandboxed frame (services/mailframes/; served by api/public/mail_frames.py)."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api.framework import SERVER_READ, Call, endpoint
from chalicelib.api.response_builders import messaging
from chalicelib.api.request_bodies.mail_frames import MailFrameIn
from chalicelib.services.mailframes import frames
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


@endpoint(bp, "/mail_frames", "POST", auth=SERVER_READ, body=MailFrameIn, status=201,
          response=response_shapes.one("mail_frame", shape.MailFrame))
def create_mail_frame(call: Call):
    """Issue a short-lived URL showing a mail's HTML as a mail client would; sends nothing."""
    body = call.body
    frame = frames.issue(call.db, call.server, body.kind, body.id, body.parts)
    return {"mail_frame": messaging.mail_frame(frame)}
