"""DELIVERY_RELAY=capture: outgoing mail is kept on this machine instead of being sent.

What ``make run`` does unless a relay or MX delivery is configured, so a newcomer never mails
the internet by accident. Each message is written, exactly as it would have gone out (signed,
tracked), to ``CAPTURE_DIR/<token>.eml`` with Return-Path and Delivered-To headers on top, as
a mailbox would store it; open it in any mail client. The delivery worker records the attempt
as accepted (host ``capture``, code 250), so the message is Sent, its events and webhooks fire,
and GET /messages/{id}/raw serves the same bytes. Writing is atomic and named by the token, so
a worker that repeats an attempt rewrites the same file."""
from __future__ import annotations

import os
import re

from chalicelib.config import get_settings

HOST = "capture"


def path_for(mail_from: str) -> str:
    token = re.sub(r"[^A-Za-z0-9_-]", "", mail_from.partition("@")[0]) or "message"
    return os.path.join(get_settings().capture_dir, f"{token}.eml")


def keep(*, mail_from: str, rcpt_to: str, data: bytes) -> str:
    """Write the message; returns its path."""
    path = path_for(mail_from)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    envelope = f"Return-Path: <{mail_from}>\r\nDelivered-To: {rcpt_to}\r\n".encode()
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "wb") as out:
        out.write(envelope + data)
    os.replace(partial, path)
    return path
