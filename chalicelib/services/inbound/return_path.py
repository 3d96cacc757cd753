"""Return paths: the envelope sender of every outgoing message is ``<token>@<RETURN_PATH_DOMAIN>``
or, for a domain with its own return path, ``<token>@<return_path_host>.<domain>`` (a CNAME
to RETURN_PATH_DOMAIN, so its mail reaches the same gateway). Whatever arrives there (a DSN,
a feedback report) names its original message by the token, and is stored as an incoming
message with ``bounce`` true beside it: bounces and complaints alike."""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from chalicelib import observability, statuses
from chalicelib.config import get_settings
from chalicelib.db.models import Domain, Message, Submission
from chalicelib.services.inbound import receive as inbound


def is_return_path(address: str) -> bool:
    """``address`` is at the installation's RETURN_PATH_DOMAIN."""
    return address.rpartition("@")[2].lower().rstrip(".") == \
        get_settings().effective_return_path_domain.lower()


def is_domain_return_path(db: Session, address: str) -> bool:
    """``address`` is at a sending domain's own return-path host (``rp.example.com``)."""
    host, _, name = address.rpartition("@")[2].lower().rstrip(".").partition(".")
    if not host or "." not in name:
        return False
    return db.scalar(select(Domain.id).where(Domain.name == name,
                                             Domain.return_path_host == host).limit(1)) is not None


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
    submission = Submission(server_id=original.server_id, size=len(raw), raw=raw)
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
    observability.count("bounced", report["type"] == "hard")
    observability.log("bounce.received", "warning", bounce_id=bounce.id,
                      original_message_id=original.id, token=original.token,
                      server_id=original.server_id, rcpt_to=original.rcpt_to,
                      type=report["type"], status=report["status"],
                      diagnostic=report["diagnostic"])
    return bounce
