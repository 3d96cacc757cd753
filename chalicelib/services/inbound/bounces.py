"""Bounces: a delivery status notification (RFC 3464) or any other reply arriving at an
outgoing message's return-path address ``<token>@<RETURN_PATH_DOMAIN>``, or
``<token>@<return_path_host>.<domain>`` for a domain with its own return path (that name is
a CNAME to RETURN_PATH_DOMAIN, so its mail reaches the same gateway).

The token in the local part names the original message (scope outgoing, not itself a
bounce). The DSN is stored as a Message with ``bounce`` true and ``original_message_id``, its
parsed report (status code, action, diagnostic, recipient, remote MTA) in the message's
metadata. A hard bounce (action ``failed`` or a 5.x.x status) marks the original ``Bounced``
and goes to the suppression policy (services/suppressions/policy.py) exactly as a hard
delivery failure does: only a reason about the address suppresses at once; a delay report is
only recorded. Each report carries the taxonomy's verdict (services/failures/: reason,
category, about_recipient, transient, blames) from its status code, action and diagnostic;
the original gets ``bounce_category`` and ``bounce_reason``.

A feedback report (ARF) arriving at a return path is a complaint (``complaints.py``, chosen
by ``classify.py``), stored the same way (``return_path.store``; bounce_type ``complaint``).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import errors, statuses
from chalicelib.db.models import Message
from chalicelib.services import failures
from chalicelib.services.inbound import return_path

if TYPE_CHECKING:
    from email.message import Message as EmailMessage

_SMTP_REPLY = re.compile(r"^\s*([245]\d\d)[ -].*$", re.MULTILINE)


def _field_value(value) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text or None


def _typed(value: str | None) -> str | None:
    """``rfc822; user@example.com`` -> ``user@example.com``."""
    if value and ";" in value:
        return value.split(";", 1)[1].strip() or None
    return value


def _status_blocks(msg: EmailMessage) -> list[EmailMessage]:
    for part in msg.walk():
        if part.get_content_type() in ("message/delivery-status", "message/global-delivery-status"):
            payload = part.get_payload()
            if isinstance(payload, list):
                return payload
            text = payload if isinstance(payload, str) else ""
            blocks = re.split(r"\r?\n\r?\n", text.strip())
            return [return_path.parser().parsebytes(b.encode("utf-8", "replace"))
                    for b in blocks if b.strip()]
    return []


def parse_dsn(raw: bytes) -> dict:
    """The report of a bounce: status, action, diagnostic, final recipient, remote MTA,
    type (hard, soft or null when nothing could be read) and whether it is an RFC 3464 report."""
    msg = return_path.parser().parsebytes(raw)
    blocks = _status_blocks(msg)
    report = {"status": None, "action": None, "diagnostic": None, "final_recipient": None,
              "remote_mta": None, "reporting_mta": None, "dsn": bool(blocks),
              "suppressed": False}
    if blocks:
        report["reporting_mta"] = _typed(_field_value(blocks[0].get("Reporting-MTA")))
        recipient = blocks[1] if len(blocks) > 1 else blocks[0]
        for block in blocks[1:]:  # the first failed recipient wins
            if (_field_value(block.get("Action")) or "").lower() == "failed":
                recipient = block
                break
        report["action"] = (_field_value(recipient.get("Action")) or "").lower() or None
        status = _field_value(recipient.get("Status"))
        report["status"] = failures.enhanced_status(status) or status
        report["diagnostic"] = _typed(_field_value(recipient.get("Diagnostic-Code")))
        report["final_recipient"] = _typed(_field_value(recipient.get("Final-Recipient")))
        report["remote_mta"] = _typed(_field_value(recipient.get("Remote-MTA")))
    else:  # a non-standard bounce: look for an enhanced status code in the text
        text = _plain_text(msg)
        report["status"] = failures.enhanced_status(text)
        reply = _SMTP_REPLY.search(text)
        if reply:
            report["diagnostic"] = reply.group(0).strip()[:1000]
    status = report["status"] or ""
    if report["action"] == "failed" or status.startswith("5"):
        report["type"] = "hard"
    elif report["action"] == "delayed" or status.startswith("4"):
        report["type"] = "soft"
    else:
        report["type"] = None
    report.update(dict.fromkeys(("category", "reason", "about_recipient", "transient",
                                 "blames", "suppression")))
    if report["type"] is not None:
        report.update(verdict(report).as_dict())
    return report


def verdict(report: dict) -> failures.Verdict:
    """The taxonomy's verdict on a parsed report (its status, action and diagnostic)."""
    return failures.classify(status=report["status"], text=report["diagnostic"],
                             action=report["action"])


def _plain_text(msg: EmailMessage) -> str:
    chunks = []
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            payload = part.get_payload(decode=True) or b""
            chunks.append(payload.decode(part.get_content_charset() or "utf-8", "replace"))
    return "\n".join(chunks)[:100_000]


def receive(db: Session, *, rcpt_to: str, mail_from: str, raw: bytes) -> Message | None:
    """Store a bounce for the message behind the return path ``rcpt_to``; None when no
    message matches."""
    from chalicelib.services.suppressions import policy

    original = return_path.original_for(db, rcpt_to)
    if original is None:
        return None
    report = parse_dsn(raw)
    bounce = return_path.store(db, original, rcpt_to=rcpt_to, mail_from=mail_from, raw=raw, report=report)
    if report["type"] == "hard":
        detail = " ".join(x for x in (report["status"], report["diagnostic"]) if x)
        original.status = statuses.BOUNCED
        original.held = False
        original.next_attempt_at = None
        original.status_details = f"bounced: {detail}" if detail else "bounced"
        original.bounce_category = report["category"]
        original.bounce_reason = report["reason"]
        added = policy.after_failure(
            db, original.server_id, original.rcpt_to, verdict(report), origin="bounce",
            details=f"bounce: {detail}" if detail else "bounce", message_id=original.id)
        report["suppressed"] = added is not None
        bounce.metadata_json = {**bounce.metadata_json, "dsn": report}
    db.flush()
    return bounce


def list_stmt(server_id: int, category: str | None = None):
    stmt = select(Message).where(Message.server_id == server_id, Message.bounce.is_(True))
    if category is not None:
        stmt = stmt.where(Message.bounce_category == category)
    return stmt.order_by(Message.id.desc())


def find(db: Session, server_id: int, bounce_id: int) -> Message:
    bounce = db.get(Message, bounce_id)
    if bounce is None or bounce.server_id != server_id or not bounce.bounce:
        raise errors.NotFound(f"no bounce {bounce_id}")
    return bounce


