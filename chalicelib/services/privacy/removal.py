"""Data removal: one address's messages' content and personal fields, across servers.

What is removed for the address A (normalized as suppressions normalize it) on the chosen
servers:

- messages whose recipient (``rcpt_to``) or sender (``mail_from``, mail that arrived) is A,
  and the bounces and complaints stored about them (``original_message_id``): their content
  is erased (``services.content.erase``: the raw source once no other recipient's message of
  the same submission keeps it, the signed copy at once; reads say ContentExpired), the
  address fields that held A become ``REMOVED``, and ``subject``, ``metadata`` and
  ``status_details`` are cleared. The rows stay, with status, tag, stream, dates, counts;
- their history: each event's ``details``, each delivery attempt's ``output``/``details``
  (remote replies often quote the address), each open's and click's IP address and user
  agent, each infrastructure signal's reply text;
- webhook payload history: the queued requests about those messages (A in the signed body
  becomes ``REMOVED``) and the attempt logs whose response or error quotes A;
- the suppression list: A's entries are kept as ``sha256:<hex>`` of the address
  (``entries.hashed``, matched by every submission's suppression check) so the address stays
  suppressed without being stored, or deleted when ``keep_suppression`` is false; A's count of
  repeated failures is deleted.

Left as they are: the statistics' counters (no address in them), messages with work still
pending (due for delivery or handover; counted in ``skipped_pending`` — remove again once
they are done), idempotency keys' stored answers (gone within two days), the URLs of tracked
links (the sender's content), and a shared raw source while another recipient's message of
the same submission keeps its content. The audit trail records the removal with the
address's hash, never the address. Running it again removes nothing more (idempotent).
"""
from __future__ import annotations

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from chalicelib import statuses
from chalicelib.db.models import (ClickEvent, Delivery, InfrastructureSignal, Message,
                                  MessageEvent, OpenEvent, RecipientFailure, Suppression,
                                  WebhookRequest, WebhookRequestLog)
from chalicelib.services import content
from chalicelib.services.suppressions import entries as suppressions

REMOVED = "removed@removed.invalid"
PENDING_STATUSES = statuses.DELIVERABLE + statuses.INBOUND_DUE
CHUNK = 500


def _chunks(ids: list[int]):
    for start in range(0, len(ids), CHUNK):
        yield ids[start:start + CHUNK]


def remove(db: Session, server_ids: list[int], address: str, *,
           keep_suppression: bool = True) -> dict[str, int]:
    """Remove ``address``'s personal data on ``server_ids``; returns what was removed."""
    a = suppressions.normalize(address)
    summary = {"messages": 0, "content_erased": 0, "skipped_pending": 0, "events": 0,
               "deliveries": 0, "opens": 0, "clicks": 0, "webhook_requests": 0,
               "webhook_logs": 0, "suppressions_hashed": 0, "suppressions_deleted": 0,
               "recipient_failures": 0}
    if not server_ids:
        return summary
    in_servers = Message.server_id.in_(server_ids)
    matches = or_(func.lower(func.trim(Message.rcpt_to)) == a,
                  func.lower(func.trim(Message.mail_from)) == a)
    rows = list(db.execute(select(Message.id, Message.status).where(in_servers, matches)).all())
    # Bounces and complaints stored about those messages quote the address.
    about = [r.id for r in rows]
    for chunk in _chunks(about):
        rows.extend(db.execute(select(Message.id, Message.status).where(
            in_servers, Message.original_message_id.in_(chunk))).all())
    found = {r.id: r.status for r in rows}
    pending = [i for i, s in found.items() if s in PENDING_STATUSES]
    ids = sorted(i for i, s in found.items() if s not in PENDING_STATUSES)
    summary["skipped_pending"] = len(pending)
    summary["messages"] = len(ids)
    for chunk in _chunks(ids):
        summary["content_erased"] += content.erase(db, chunk)
        by_id = Message.id.in_(chunk)
        for column in (Message.rcpt_to, Message.mail_from):
            db.execute(update(Message).where(by_id, func.lower(func.trim(column)) == a)
                       .values({column.key: REMOVED})
                       .execution_options(synchronize_session=False))
        db.execute(update(Message).where(by_id).values(
            subject=None, metadata_json=None, status_details=None)
            .execution_options(synchronize_session=False))
        summary["events"] += db.execute(
            update(MessageEvent).where(MessageEvent.message_id.in_(chunk),
                                       MessageEvent.details.is_not(None))
            .values(details=None).execution_options(synchronize_session=False)).rowcount
        summary["deliveries"] += db.execute(
            update(Delivery).where(Delivery.message_id.in_(chunk),
                                   or_(Delivery.output.is_not(None),
                                       Delivery.details.is_not(None)))
            .values(output=None, details=None)
            .execution_options(synchronize_session=False)).rowcount
        for model, key in ((OpenEvent, "opens"), (ClickEvent, "clicks")):
            summary[key] += db.execute(
                update(model).where(model.message_id.in_(chunk),
                                    or_(model.ip_address.is_not(None),
                                        model.user_agent.is_not(None)))
                .values(ip_address=None, user_agent=None)
                .execution_options(synchronize_session=False)).rowcount
        db.execute(update(InfrastructureSignal).where(InfrastructureSignal.message_id.in_(chunk))
                   .values(text=None).execution_options(synchronize_session=False))
        for request in db.scalars(select(WebhookRequest).where(
                WebhookRequest.message_id.in_(chunk))):
            body = _without(request.body, a)
            if body != request.body:
                request.body = body
                summary["webhook_requests"] += 1
    summary["webhook_logs"] = db.execute(
        update(WebhookRequestLog).where(
            WebhookRequestLog.server_id.in_(server_ids),
            or_(func.lower(WebhookRequestLog.response_body).contains(a, autoescape=True),
                func.lower(WebhookRequestLog.error).contains(a, autoescape=True)))
        .values(response_body=None, error=None)
        .execution_options(synchronize_session=False)).rowcount
    summary.update(_suppressions(db, server_ids, a, keep_suppression))
    summary["recipient_failures"] = db.execute(
        delete(RecipientFailure).where(RecipientFailure.server_id.in_(server_ids),
                                       RecipientFailure.address == a)
        .execution_options(synchronize_session=False)).rowcount
    db.flush()
    return summary


def _without(text: str, a: str) -> str:
    """``text`` with every spelling of ``a`` (any case) replaced by REMOVED."""
    lowered, out, start = text.lower(), [], 0
    while (at := lowered.find(a, start)) >= 0:
        out.append(text[start:at] + REMOVED)
        start = at + len(a)
    out.append(text[start:])
    return "".join(out)


def _suppressions(db: Session, server_ids: list[int], a: str, keep: bool) -> dict[str, int]:
    """A's entries become hashed entries (or go); a hashed twin already there wins."""
    hashed = suppressions.hashed(a)
    plain = (Suppression.server_id.in_(server_ids), Suppression.address == a)
    if not keep:
        return {"suppressions_hashed": 0, "suppressions_deleted": db.execute(
            delete(Suppression).where(*plain)
            .execution_options(synchronize_session=False)).rowcount}
    twins = {(s, k) for s, k in db.execute(select(Suppression.server_id, Suppression.stream_key)
                                           .where(Suppression.server_id.in_(server_ids),
                                                  Suppression.address == hashed))}
    deleted = hashed_count = 0
    for row in db.scalars(select(Suppression).where(*plain)):
        if (row.server_id, row.stream_key) in twins:
            db.delete(row)
            deleted += 1
        else:
            row.address, row.details = hashed, None
            hashed_count += 1
    return {"suppressions_hashed": hashed_count, "suppressions_deleted": deleted}
