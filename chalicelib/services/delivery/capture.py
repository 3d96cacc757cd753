"""DELIVERY_RELAY=capture: outgoing mail is kept instead of being sent.

What ``make run`` does unless a relay or MX delivery is configured, so a newcomer never mails
the internet by accident. The delivery worker records the attempt as accepted (host
``capture``, code 250), so the message is Sent, its events and webhooks fire, and GET
/messages/{id}/raw serves the exact bytes that would have gone out (signed, tracked).

The database is where captured mail lives, on every deployment (Lambda has no shared disk):
the outcome's transaction also writes an entry of the server's captured-mail inbox
(``captured_messages``, reason ``capture``; services/messages/captured.py reads it), and the
bytes are the message's own. Messages of a server in Development mode are held and go to the
same inbox (reason ``development``). With ``CAPTURE_DIR`` set (the local default) each
message is also written to ``CAPTURE_DIR/<token>.eml`` with Return-Path and Delivered-To
headers on top, as a mailbox would store it; open it in any mail client. Writing is atomic
and named by the token, so a worker that repeats an attempt rewrites the same file; a file
that cannot be written is a soft failure (retried), never a silent loss."""
from __future__ import annotations

import os
import re

from chalicelib.config import get_settings

HOST = "capture"
# Why a message is in the captured-mail inbox (captured_messages.reason).
CAPTURED = "capture"         # DELIVERY_RELAY=capture
DEVELOPMENT = "development"  # its server is in Development mode (held, never sent)
REASONS = (CAPTURED, DEVELOPMENT)


def mailbox_copy(mail_from: str, rcpt_to: str, data: bytes) -> bytes:
    """The message as a mailbox keeps it: the envelope as Return-Path and Delivered-To."""
    return f"Return-Path: <{mail_from}>\r\nDelivered-To: {rcpt_to}\r\n".encode() + data


def path_for(mail_from: str) -> str | None:
    """Where the message's .eml goes; None when CAPTURE_DIR is empty (no files)."""
    directory = get_settings().capture_dir
    if not directory:
        return None
    token = re.sub(r"[^A-Za-z0-9_-]", "", mail_from.partition("@")[0]) or "message"
    return os.path.join(directory, f"{token}.eml")


def keep(*, mail_from: str, rcpt_to: str, data: bytes) -> str | None:
    """Write the message's .eml when CAPTURE_DIR is set; returns its path (None: no file)."""
    path = path_for(mail_from)
    if path is None:
        return None
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "wb") as out:
        out.write(mailbox_copy(mail_from, rcpt_to, data))
    os.replace(partial, path)
    return path
