"""Retention: old mail, old attempt logs and spent tokens are deleted in bounded batches.

Each server keeps its messages' content (raw source, signed copy) for
``content_retention_days`` and then erases it, the record staying (content_retention.py).
Each server keeps its messages for ``message_retention_days``: a submission older than that
is deleted with its messages (deliveries, events, raw bytes and tracking go with them through
ON DELETE CASCADE) — but never while one of its messages still has work pending. Statistics
are rolled-up counters, so they keep the history. Webhook attempt logs are kept
``WEBHOOK_LOG_RETENTION_DAYS`` and DMARC reports ``DMARC_REPORT_RETENTION_DAYS`` after the
period they report on; expired sessions, reset tokens, SSO states, passkey ceremonies and
suppressions go a day after they expire; counted repeated failures once stale; mail frames once they expire (each server also
clears its own when it issues one); delivery destinations idle for a day (per-destination
pacing); a domain's former return-path hosts once the mail sent with them is gone;
infrastructure signals after INFRASTRUCTURE_SIGNAL_RETENTION_DAYS. The audit trail
(auth_events) is kept.
"""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import and_, delete, exists, select
from sqlalchemy.orm import Session

from chalicelib import clock, statuses
from chalicelib.config import get_settings
from chalicelib.db.models import (BulkJob, DkimKey, DmarcReport, IdempotencyKey,
                                  InstallationKey, MailFrame, Message, OidcLogin,
                                  PasskeyCeremony, PasswordResetToken, RecipientFailure,
                                  RetiredReturnPath, Server,
                                  SmtpAuthFailure, Submission, Suppression, UserSession,
                                  WebhookRequestLog)
from chalicelib.services.delivery import pacing
from chalicelib.services.messages import content_retention
from chalicelib.services.reputation import signals

# Statuses with work still due (outgoing, then inbound).
PENDING_STATUSES = statuses.DELIVERABLE + statuses.INBOUND_DUE
BATCH = 1000


def _delete_ids(db: Session, model, ids: list[int]) -> int:
    if not ids:
        return 0
    return db.execute(delete(model).where(model.id.in_(ids))
                      .execution_options(synchronize_session=False)).rowcount


def _prune_mail(db: Session, now) -> int:
    deleted = 0
    for days in db.scalars(select(Server.message_retention_days).distinct()):
        cutoff = now - timedelta(days=days)
        servers = select(Server.id).where(Server.message_retention_days == days)
        pending = exists().where(Message.submission_id == Submission.id,
                                 Message.status.in_(PENDING_STATUSES))
        ids = list(db.scalars(select(Submission.id).where(
            Submission.server_id.in_(servers), Submission.created_at < cutoff, ~pending)
            .limit(BATCH)))
        deleted += _delete_ids(db, Submission, ids)
        # Messages stored without a submission (bounces, for instance).
        orphan_ids = list(db.scalars(select(Message.id).where(
            Message.server_id.in_(servers), Message.submission_id.is_(None),
            Message.created_at < cutoff, Message.status.not_in(PENDING_STATUSES)).limit(BATCH)))
        deleted += _delete_ids(db, Message, orphan_ids)
    return deleted


def prune(db: Session) -> dict[str, int]:
    """Delete one batch of each kind of expired row; returns how many went."""
    now = clock.now()
    grace = now - timedelta(days=1)
    log_cutoff = now - timedelta(days=get_settings().webhook_log_retention_days)
    counts = {"submissions_and_messages": _prune_mail(db, now),
              "content": content_retention.expire(db, now, BATCH)}
    for name, model, condition in (
        ("webhook_logs", WebhookRequestLog, WebhookRequestLog.created_at < log_cutoff),
        ("sessions", UserSession, UserSession.expires_at < grace),
        ("password_reset_tokens", PasswordResetToken, PasswordResetToken.expires_at < grace),
        ("oidc_logins", OidcLogin, OidcLogin.expires_at < grace),
        ("passkey_ceremonies", PasskeyCeremony, PasskeyCeremony.expires_at < grace),
        ("mail_frames", MailFrame, MailFrame.expires_at < now),
        ("suppressions", Suppression, and_(Suppression.expires_at.is_not(None),
                                           Suppression.expires_at < grace)),
        # Repeated failures whose quiet spell has begun the count again (suppressions/policy).
        ("recipient_failures", RecipientFailure, RecipientFailure.last_failed_at < now - timedelta(
            days=get_settings().suppression_repeat_days)),
        # DMARC reports (their rows go with them) by the period they report on.
        ("dmarc_reports", DmarcReport, DmarcReport.begin_at < now - timedelta(
            days=get_settings().dmarc_report_retention_days)),
        # Retired DKIM and installation keys (no longer listed after retire_at).
        ("dkim_keys", DkimKey, DkimKey.retire_at < now),
        ("installation_keys", InstallationKey, InstallationKey.retire_at < now),
        # Former return-path hosts, once the mail sent with them is gone.
        ("retired_return_paths", RetiredReturnPath, RetiredReturnPath.keep_until < now),
    ):
        ids = list(db.scalars(select(model.id).where(condition).limit(BATCH)))
        counts[name] = _delete_ids(db, model, ids)
    window = timedelta(seconds=get_settings().smtp_auth_failure_window_seconds)
    spent = select(SmtpAuthFailure.address).where(
        SmtpAuthFailure.last_failure_at < grace - window).limit(BATCH)
    counts["smtp_auth_failures"] = db.execute(
        delete(SmtpAuthFailure).where(SmtpAuthFailure.address.in_(spent))
        .execution_options(synchronize_session=False)).rowcount
    # Idempotency keys answer for 24 hours; a day later nobody can replay them.
    counts["idempotency_keys"] = db.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < grace - timedelta(days=1))
        .execution_options(synchronize_session=False)).rowcount
    counts["bulk_jobs"] = _delete_ids(db, BulkJob, list(db.scalars(
        select(BulkJob.id).where(BulkJob.finished_at < now - timedelta(days=30)).limit(BATCH))))
    counts["delivery_destinations"] = pacing.forget_idle(db, now)
    counts["infrastructure_signals"] = signals.prune(db, now, BATCH)
    return counts
