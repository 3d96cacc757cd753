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
from chalicelib.services.inbound import bounce_text, return_path

if TYPE_CHECKING:
    from email.message import Message as EmailMessage



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


_FIELDS_START = re.compile(r"^(?:Reporting-MTA|Final-Recipient|Original-Recipient):", re.I | re.M)


def _blocks_of(text: str) -> list[EmailMessage]:
    """The field blocks of a delivery-status body (blank-line separated), each read by the
    standard library's parser."""
    blocks = re.split(r"\r?\n[ \t]*\r?\n", text.strip())
    return [return_path.parser().parsebytes(b.strip().encode("utf-8", "replace") + b"\n\n")
            for b in blocks if b.strip()]


def _status_blocks(msg: EmailMessage) -> list[EmailMessage]:
    for part in msg.walk():
        if part.get_content_type() in ("message/delivery-status", "message/global-delivery-status"):
            payload = part.get_payload()
            if isinstance(payload, list):
                return payload
            return _blocks_of(payload if isinstance(payload, str) else "")
    # A report whose MIME boundary is broken (the parser sees one text body): its fields.
    body = msg.get_payload() if msg.get_content_maintype() == "multipart" else None
    if isinstance(body, str):
        start = _FIELDS_START.search(body)
        if start is not None:
            blocks = _blocks_of(body[start.start():].split("\n--", 1)[0])
            if any(b.get("Status") or b.get("Action") for b in blocks):
                return blocks
    return []


def parse_dsn(raw: bytes) -> dict:
    """The report of a bounce: status, action, diagnostic, final recipient, remote MTA,
    type (hard: the message failed; soft: a delay report; null: nothing says it failed, or an
    auto-reply), whether it is an RFC 3464 report, and the taxonomy's verdict. A report
    without a delivery-status part, or whose fields do not say why, is read from its text
    (``bounce_text``): the enhanced status, else the basic reply code, and the wording."""
    msg = return_path.parser().parsebytes(raw)
    blocks = _status_blocks(msg)
    report = {"status": None, "action": None, "diagnostic": None, "final_recipient": None,
              "remote_mta": None, "reporting_mta": None, "dsn": bool(blocks),
              "suppressed": False}
    words = bounce_text.text(msg)
    code = None
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
        status = report["status"] or ""
        if report["action"] == "failed" or status.startswith("5"):
            report["type"] = "hard"
        elif report["action"] in ("delayed", "delivered", "relayed", "expanded"):
            report["type"] = "soft" if report["action"] == "delayed" else None
        elif status.startswith("4"):
            report["type"] = "soft"
        else:
            report["type"] = "hard" if bounce_text.kind(msg, words) == "failure" and \
                bounce_text.failed(msg, words) else None
    else:  # a non-standard bounce: its text says what happened
        report["status"] = failures.enhanced_status(words)
        code = failures.reply_code(words)
        report["diagnostic"] = bounce_text.diagnostic(words)
        kind = bounce_text.kind(msg, words)
        if kind == "auto_reply":
            report["type"] = None
        elif kind == "delay":
            report["type"] = "soft"
        elif report["status"] or code or bounce_text.failed(msg, words):
            report["type"] = "hard"
        else:
            report["type"] = None
    report.update(dict.fromkeys(("category", "reason", "about_recipient", "transient",
                                 "temporary", "after_data", "doubtful", "blames",
                                 "suppression")))
    if report["type"] is not None:
        # Whether the refusal answered the message's data is told by the notification's
        # words ("in reply to end of DATA command", a transcript's ">>> DATA") as often as
        # by the Diagnostic-Code.
        data = failures.answered_data(words)
        # a non-standard bounce that failed is a final failure, as "Action: failed" is
        action = report["action"] or ("failed" if report["type"] == "hard" else None)
        found = failures.classify(status=report["status"], code=code,
                                  text=report["diagnostic"] if blocks else words,
                                  action=action, after_data=data)
        if found.reason == "unknown" and words and blocks:
            # The fields do not say why; the notification's words may.
            found = failures.classify(status=report["status"],
                                      text=f"{report['diagnostic'] or ''}\n{words}",
                                      action=action, after_data=data)
        if not report["diagnostic"]:
            report["diagnostic"] = bounce_text.diagnostic(words)
        report.update(found.as_dict())
    return report


def verdict(report: dict) -> failures.Verdict:
    """The taxonomy's verdict a parsed report carries."""
    return failures.Verdict(report["reason"], bool(report.get("temporary")),
                            report["status"] if failures.is_enhanced_status(report["status"])
                            else None, after_data=bool(report.get("after_data")),
                            doubtful=bool(report.get("doubtful")))


def receive(db: Session, *, rcpt_to: str, mail_from: str, raw: bytes) -> Message | None:
    """Store a bounce for the message behind the return path ``rcpt_to``; None when no
    message matches."""
    from chalicelib.services.suppressions import policy

    original = return_path.original_for(db, rcpt_to)
    if original is None:
        return None
    report = parse_dsn(raw)
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
    bounce = return_path.store(db, original, rcpt_to=rcpt_to, mail_from=mail_from, raw=raw,
                               report=report)
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


