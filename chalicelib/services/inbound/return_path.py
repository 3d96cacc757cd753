"""Return paths: the envelope sender of every outgoing message is ``<token>@<RETURN_PATH_DOMAIN>``
or, for a domain with its own return path, ``<token>@<return_path_host>.<domain>`` (a CNAME
to RETURN_PATH_DOMAIN, so its mail reaches the same gateway); the message records the host
it went out with (``messages.return_path``), and a host a domain stopped using stays a
return path while that mail is kept. Whatever arrives there (a DSN, a feedback report) names
its original message by the token, and is stored as an incoming message with ``bounce`` true
beside it: bounces and complaints alike, each also written in the original's history (a
history event, never a webhook: the spec has four)."""
from __future__ import annotations

from sqlalchemy import exists, func, or_, select
from sqlalchemy.orm import Session

from chalicelib import clock, observability, statuses
from chalicelib.config import get_settings
from chalicelib.db.models import Domain, Message, RetiredReturnPath, Submission
from chalicelib.services import content
from chalicelib.services.inbound import receive as inbound
from chalicelib.services.reputation import outcomes as reputation


def is_return_path(address: str) -> bool:
    """``address`` is at the installation's RETURN_PATH_DOMAIN."""
    return address.rpartition("@")[2].lower().rstrip(".") == \
        get_settings().effective_return_path_domain.lower()


def is_domain_return_path(db: Session, address: str) -> bool:
    """``address`` is at a sending domain's own return-path host (``rp.example.com``), or at
    one it had (changed, or the domain removed) while mail sent with it is kept: its bounces
    still come there (``domains.manage.retire_return_path``). One statement of two indexed
    lookups: no scan of messages per RCPT."""
    full = address.rpartition("@")[2].lower().rstrip(".")
    host, _, name = full.partition(".")
    if not host or "." not in name:
        return False
    current = exists().where(Domain.name == name, Domain.return_path_host == host)
    retired = exists().where(RetiredReturnPath.name == full,
                             RetiredReturnPath.keep_until > clock.now())
    return bool(db.scalar(select(or_(current, retired))))


def is_any_return_path(db: Session, address: str) -> bool:
    """``address`` is at a return path the service hands out, either of the two: bounces and
    feedback reports at either name their message by the same token (``original_for``)."""
    return is_return_path(address) or is_domain_return_path(db, address)


def original_for(db: Session, address: str) -> Message | None:
    """The outgoing message whose return path is ``address``."""
    token = address.rpartition("@")[0]
    if not token or len(token) > 64:
        return None
    base = select(Message).where(Message.scope == "outgoing", Message.bounce.is_(False))
    found = db.scalar(base.where(Message.token == token))
    if found is None:  # some MTAs lower-case local parts
        found = db.scalar(base.where(func.lower(Message.token) == token.lower()).limit(2))
    return found


def parser():
    """The standard library's parser, as reports are read (imported then, not at cold start)."""
    from email import policy
    from email.parser import BytesParser

    return BytesParser(policy=policy.compat32)


def _subject(raw: bytes) -> str | None:
    value = parser().parsebytes(raw, headersonly=True)["Subject"]
    return str(value)[:998] if value else None


def store(db: Session, original: Message, *, rcpt_to: str, mail_from: str, raw: bytes,
          report: dict) -> Message:
    """The bounce (or complaint) row for ``original``, its parsed ``report`` in metadata."""
    submission = Submission(server_id=original.server_id,
                            **content.submission_columns(content.put(raw)))
    db.add(submission)
    db.flush()
    bounce = Message(server_id=original.server_id, submission_id=submission.id,
                     token=inbound.new_token(), scope="incoming", bounce=True,
                     rcpt_to=rcpt_to[:255], mail_from=(mail_from or "")[:255],
                     subject=_subject(raw), size=len(raw), original_message_id=original.id,
                     status=statuses.PROCESSED, metadata_json={"dsn": report},
                     bounce_category=report.get("category"),
                     bounce_reason=report.get("reason"))
    db.add(bounce)
    db.flush()
    history_event(db, original, bounce, report)
    reputation.report_received(db, original, report)  # the guard's rates, signals
    observability.count("bounced", report["type"] == "hard")
    observability.log("bounce.received", "warning", bounce_id=bounce.id,
                      original_message_id=original.id, token=original.token,
                      server_id=original.server_id, rcpt_to=original.rcpt_to,
                      type=report["type"], status=report["status"],
                      diagnostic=report["diagnostic"])
    return bounce


BOUNCED, COMPLAINED = "MessageBounced", "MessageComplained"
AUTH_FAILURE_REPORTED = "MessageAuthFailureReported"


def history_event(db: Session, original: Message, stored: Message, report: dict):
    """The report in the original message's history (GET .../messages/{id} shows it):
    ``MessageComplained`` for a feedback report, ``MessageAuthFailureReported`` for an
    authentication-failure report (RFC 6591: never a complaint), ``MessageBounced`` for a
    bounce of any kind (a delay notice included), with what it said and the stored report's id. A history event
    only: no webhook fires (the spec has exactly four events, none of them a bounce)."""
    from chalicelib.services.messages import events

    if report.get("type") in ("complaint", "auth_failure"):
        name = COMPLAINED if report["type"] == "complaint" else AUTH_FAILURE_REPORTED
        details = (f"{report.get('feedback_type') or 'abuse'} report from "
                   f"{report.get('user_agent') or 'a feedback loop'}")
    else:
        name = BOUNCED
        kind = {"hard": "hard bounce", "soft": "delay notice"}.get(report.get("type"),
                                                                   "bounce")
        said = " ".join(x for x in (report.get("status"), report.get("diagnostic")) if x)
        source = report.get("reporting_mta") or report.get("remote_mta")
        details = kind + (f" from {source}" if source else "") + (f": {said}" if said else "")
    return events.emit(db, original, name, f"{details} (bounce {stored.id})"[:2000])
