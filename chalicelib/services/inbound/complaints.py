"""Spam complaints: feedback reports (ARF, RFC 5965) from mailbox providers' feedback loops.

A report is a ``multipart/report; report-type=feedback-report`` whose second part is a
``message/feedback-report`` (Feedback-Type, User-Agent, Original-Mail-From,
Original-Rcpt-To, Arrival-Date, Source-IP, ...) and whose third part is the original message
or its header (``message/rfc822``, ``text/rfc822-headers``, and as providers also send them
``text/rfc822-header``, ``message/rfc822-headers``, ``message/global``). It arrives at the return-path address of the
message (providers send it to the envelope sender: ``<token>@RETURN_PATH_DOMAIN`` or a
domain's own ``<token>@rp.<domain>``) or at an address the operator registered with a
feedback loop (FBL_ADDRESSES). Everything is read with the standard library's parser.

An authentication-failure report (RFC 6591: Feedback-Type ``auth-failure``, as DMARC failure
reports come in ARF form) is read the same way and stored as such (bounce_type and category
``auth_failure``): never a complaint, never a suppression. A complaint some providers forward
without ARF (a plain multipart message whose subject says it is a complaint or abuse report,
with the original attached as ``message/rfc822`` or its header) is read as an ``abuse``
report (``forwarded`` true) and matched the same way, where its original can be found.

Matching the original outgoing message, first hit wins: the return-path address the report
was sent to; the report's Original-Mail-From; the embedded original's Return-Path (each only
when it is one of our return paths, ``return_path.is_any_return_path``, and by the same token
lookup); the original's Message-ID (unfolded, without brackets) together with the report's
Original-Rcpt-To or the original's To when that names one address, or alone when only one
recipient got that Message-ID. Providers often redact the recipient, which is why the return
path (our per-message token) is tried first; a report that cannot say which of several
recipients complained suppresses nobody.

The report is stored like a bounce (a Message with ``bounce`` true, bounce_type
``complaint``, category ``complaint``) and, unless its Feedback-Type is ``not-spam``, the
recipient is suppressed on every stream of the server (reason SpamComplaint, no expiry: a
person who marked a message as spam should get nothing more from that server, whatever the
stream). The original's status does not change (it was delivered). The spec has no complaint
event, so no webhook fires; each stored report writes a ``complaint.received`` log line (the
message and its token, never the complaining address) and a spam one counts
``MessagesComplained``.
"""
from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import observability
from chalicelib.db.models import Message
from chalicelib.services import mime
from chalicelib.services.inbound import return_path

if TYPE_CHECKING:
    from email.message import Message as EmailMessage

log = logging.getLogger(__name__)

REPORT_TYPE = "feedback-report"
NOT_SPAM = "not-spam"
AUTH_FAILURE = "auth-failure"  # RFC 6591: a message failed authentication (DMARC forensic)
_ADDRESS = re.compile(r"<?([^<>\s]+@[^<>\s]+?)>?\s*$")
# A provider's complaint forwarded without ARF: the original attached, the subject saying so.
_FORWARDED_SUBJECT = re.compile(
    r"complaint about message|abuse report|spam (?:complaint|report)|reported as (?:spam|junk)|"
    r"junk (?:mail )?report|feedback[- ]loop|\bfbl\b|this is an? (?:e-?mail )?abuse report",
    re.I)


def is_feedback_report(msg: EmailMessage) -> bool:
    return msg.get_content_type() == "multipart/report" and \
        (msg.get_param("report-type") or "").lower() == REPORT_TYPE


def is_forwarded_complaint(msg: EmailMessage) -> bool:
    """A complaint some providers send as a plain message with the original attached
    (``message/rfc822`` or its header) and a subject that says what it is."""
    return msg.get_content_maintype() == "multipart" and not is_feedback_report(msg) and \
        bool(_FORWARDED_SUBJECT.search(str(msg.get("Subject") or ""))) and \
        _original_headers(msg) is not None


def _clean(value) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text[:998] or None


def _address(value) -> str | None:
    match = _ADDRESS.search(_clean(value) or "")
    return match.group(1).strip().lower() if match else None


def _report_fields(msg: EmailMessage) -> EmailMessage | None:
    for part in msg.walk():
        if part.get_content_type() == "message/feedback-report":
            payload = part.get_payload()
            if isinstance(payload, list):
                return payload[0] if payload else None
            text = payload if isinstance(payload, str) else ""
            return return_path.parser().parsebytes(text.strip().encode("utf-8", "replace") + b"\n\n")
    return None


# The parts a report embeds the original (or only its header) in. The parser reads every
# message/* part as an embedded message; text/* ones are parsed here.
_MESSAGE_PARTS = ("message/rfc822", "message/global", "message/rfc822-headers",
                  "message/global-headers")
_HEADER_PARTS = ("text/rfc822-headers", "text/rfc822-header", "text/rfc822")


def _original_headers(msg: EmailMessage) -> EmailMessage | None:
    for part in msg.walk():
        kind = part.get_content_type()
        if kind in _MESSAGE_PARTS:
            payload = part.get_payload()
            if isinstance(payload, list) and payload:
                return payload[0]
        elif kind in _HEADER_PARTS:
            body = part.get_payload(decode=True) or b""
            return return_path.parser().parsebytes(body, headersonly=True)
    return None


def _only_address(values: list | None) -> str | None:
    """The address of a To header that names exactly one (with several, which of them
    complained is unknown)."""
    from email.utils import getaddresses

    found = [addr for _, addr in getaddresses([str(v) for v in values or []]) if "@" in addr]
    return found[0].strip().lower() if len(found) == 1 else None


def parse(raw: bytes) -> dict | None:
    """The fields of an ARF report; None when ``raw`` is not one."""
    msg = return_path.parser().parsebytes(raw)
    forwarded = not is_feedback_report(msg)
    if forwarded and not is_forwarded_complaint(msg):
        return None
    fields = None if forwarded else _report_fields(msg)
    original = _original_headers(msg)
    get = (lambda name: _clean(fields.get(name))) if fields is not None else (lambda name: None)
    feedback_type = (get("Feedback-Type") or ("abuse" if forwarded else "other")).lower()
    kind = "auth_failure" if feedback_type == AUTH_FAILURE else "complaint"
    user_agent = get("User-Agent")
    if forwarded:
        user_agent = _address(msg.get("From")) or "a forwarded complaint"
    report = {
        "type": kind, "category": kind, "feedback_type": feedback_type,
        "forwarded": forwarded, "user_agent": user_agent, "version": get("Version"),
        "original_mail_from": _address(get("Original-Mail-From")),
        "original_rcpt_to": _address(get("Original-Rcpt-To")),
        "arrival_date": get("Arrival-Date") or get("Received-Date"),
        "source_ip": get("Source-IP"), "reported_domain": get("Reported-Domain"),
        "reporting_mta": get("Reporting-MTA"),
        "original_return_path": None, "original_message_id": None, "original_to": None,
        # the bounce record's fields, as for a DSN
        "status": None, "action": None, "remote_mta": None, "dsn": False,
        "diagnostic": f"feedback report: {feedback_type}",
    }
    report["final_recipient"] = report["original_rcpt_to"]
    if original is not None:
        report["original_return_path"] = _address(original.get("Return-Path"))
        report["original_message_id"] = mime.message_id(original.get("Message-ID"))
        report["original_to"] = _only_address(original.get_all("To"))
    return report


def find_original(db: Session, report: dict, rcpt_to: str | None = None) -> Message | None:
    for address in (rcpt_to, report["original_mail_from"], report["original_return_path"]):
        if address and return_path.is_any_return_path(db, address):
            found = return_path.original_for(db, address)
            if found is not None:
                return found
    # Read (and stored when sent) by mime.message_id: without brackets or folding.
    message_id = report["original_message_id"]
    if not message_id:
        return None
    candidates = list(db.scalars(
        select(Message).where(Message.message_id_header == message_id,
                              Message.scope == "outgoing", Message.bounce.is_(False))
        .order_by(Message.id).limit(1000)))
    for recipient in (report["original_rcpt_to"], report["original_to"]):
        if recipient:
            matches = [m for m in candidates if m.rcpt_to.lower() == recipient]
            if matches:
                return matches[0]
    return candidates[0] if len(candidates) == 1 else None


def receive(db: Session, *, rcpt_to: str, mail_from: str, raw: bytes,
            report: dict | None = None) -> Message | None:
    """Store the complaint and suppress its recipient; None when ``raw`` is no ARF report or
    no original message matches (the report is then dropped: nothing to act on)."""
    from chalicelib.services.suppressions import entries

    report = report or parse(raw)
    if report is None:
        return None
    original = find_original(db, report, rcpt_to)
    if original is None:
        log.info("feedback report to %s matched no message; dropped", rcpt_to)
        return None
    report["final_recipient"] = report["final_recipient"] or original.rcpt_to
    # An authentication-failure report says the message failed SPF/DKIM/DMARC somewhere,
    # nothing of what its recipient wants: recorded, never a complaint.
    spam = report["type"] == "complaint" and report["feedback_type"] != NOT_SPAM
    report["suppressed"] = spam  # the record says so, as a bounce's does
    stored = return_path.store(db, original, rcpt_to=rcpt_to, mail_from=mail_from, raw=raw,
                           report=report)
    if spam:
        entries.suppress(db, original.server_id, original.rcpt_to,
                              reason="SpamComplaint", origin="complaint",
                              details=f"{report['feedback_type']} report from "
                                      f"{report['user_agent'] or 'a feedback loop'}"[:1000])
    db.flush()
    if spam:
        observability.count("complained")
    # Which message, never who complained: the recipient's address is not written.
    observability.log("complaint.received" if report["type"] == "complaint"
                      else "auth_failure_report.received", "warning" if spam else "info",
                      complaint_id=stored.id, original_message_id=original.id,
                      token=original.token, server_id=original.server_id,
                      feedback_type=report["feedback_type"], user_agent=report["user_agent"],
                      suppressed=spam)
    return stored

