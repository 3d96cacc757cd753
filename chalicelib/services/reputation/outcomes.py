"""Where the rest of the service tells the reputation package what happened: one function
for delivery, one for what comes back. Each reads the failure's reason (``services/failures/``)
and does what it implies, in the caller's transaction:

* a permanent failure whose reason says the address is bad (what the suppression policy
  suppresses at once) counts a bounce toward the server's rates (``guard.count``, once per
  message);
* a spam complaint counts a complaint (a ``not-spam`` or authentication-failure report
  does not);
* a reason that blames the sending IP or domain records an infrastructure signal
  (``signals.record``).
"""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from chalicelib import statuses
from chalicelib.db.models import Delivery, Domain
from chalicelib.services import failures
from chalicelib.services.reputation import guard, signals

FAILED = (statuses.SOFT_FAIL, statuses.HARD_FAIL)
# Feedback reports that are no complaint about our mail.
NOT_COMPLAINTS = ("not-spam", "auth-failure")


def delivery_outcome(db: Session, message, attempt: dict) -> None:
    """One delivery attempt's outcome (``delivery/recorder.outcome``, in the outcome's
    transaction: written with it, or not at all when the claim was lost). ``message``: the
    claimed row (server, domain, IP pool); ``attempt``: the Delivery row's values."""
    if attempt.get("status") not in FAILED:
        return
    info = failures.REASONS.get(attempt.get("reason") or "")
    if info is None:
        return
    code = attempt.get("code")
    text = attempt.get("output") or attempt.get("details")
    if attempt["status"] == statuses.HARD_FAIL and info.about_recipient and \
            _suppressed_at_once(attempt, code, text):
        guard.count(db, message.server_id, message.id, guard.BOUNCE, info.name)
    if info.blames:
        signals.record(
            db, server_id=message.server_id, blames=info.blames, reason=info.name,
            origin=signals.DELIVERY, message_id=message.id,
            domain_id=getattr(message, "domain_id", None),
            domain=getattr(message, "domain_name", None),
            ip_pool_id=getattr(message, "ip_pool_id", None),
            source_address=attempt.get("source_address"), receiver=attempt.get("host"),
            code=code, status=failures.enhanced_status(text or ""), text=text)


def _suppressed_at_once(attempt: dict, code: int | None, text: str | None) -> bool:
    """The address-level refusal is one the suppression policy suppresses at once: the DNS
    saying the domain takes no mail (no host was tried), or a permanent refusal at RCPT that
    is not a filter's doubtful wording; address wording after DATA, in a 4xx reply, or a
    filter's, counts only as a repeat there, and is no bounce of the address here."""
    if attempt.get("host") is None:
        return True
    verdict = failures.classify(code=code, text=text,
                                after_data=attempt.get("stage") in ("data", "done"))
    return verdict.suppression == failures.AT_ONCE


def report_received(db: Session, original, report: dict) -> None:
    """A bounce or feedback report stored for the outgoing message ``original``
    (``inbound/return_path.store``); ``report``: its parsed fields with the taxonomy's
    verdict (reason, blames, suppression) for a bounce."""
    kind = report.get("type")
    if kind == "complaint":
        if (report.get("feedback_type") or "").lower() not in NOT_COMPLAINTS:
            guard.count(db, original.server_id, original.id, guard.COMPLAINT)
        return
    if kind == "hard" and report.get("suppression") == failures.AT_ONCE:
        guard.count(db, original.server_id, original.id, guard.BOUNCE, report.get("reason"))
    blames = report.get("blames")
    if blames and report.get("reason"):
        source = db.scalar(select(Delivery.source_address).where(
            Delivery.message_id == original.id, Delivery.status == statuses.SENT)
            .order_by(Delivery.id.desc()).limit(1))
        domain = db.scalar(select(Domain.name).where(Domain.id == original.domain_id)) \
            if original.domain_id else original.mail_from.rpartition("@")[2] or None
        diagnostic = report.get("diagnostic")
        signals.record(
            db, server_id=original.server_id, blames=blames, reason=report["reason"],
            origin=signals.BOUNCE, message_id=original.id, domain_id=original.domain_id,
            domain=domain, ip_pool_id=signals.pool_of(db, source, original.server_id),
            source_address=source,
            receiver=report.get("remote_mta") or report.get("reporting_mta"),
            code=failures.reply_code(diagnostic or ""), status=report.get("status"),
            text=diagnostic)
