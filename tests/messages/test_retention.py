"""Retention: old mail goes (with its attempts and events), pending mail and other servers'
recent mail stay; spent tokens, old webhook logs and lapsed suppressions are cleaned up."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.models import (Delivery, Message, MessageEvent, Server, Submission,
                                  Suppression, User, UserSession)
from chalicelib.services.security.tokens import generate_secret, hash_secret
from chalicelib.workers import retention
from tests.support import Api, all_tenants, unique


def _server_id(tenant) -> int:
    with all_tenants() as db:
        return db.scalar(select(Server.id).where(Server.permalink == tenant.server,
                                                 Server.organization.has(permalink=tenant.org)))


def _mail(db, server_id: int, age_days: float, status: str) -> int:
    created = clock.now() - timedelta(days=age_days)
    submission = Submission(server_id=server_id, size=3, raw=b"x\r\n", created_at=created)
    db.add(submission)
    db.flush()
    message = Message(server_id=server_id, submission_id=submission.id, token=unique("tok")[:32],
                      rcpt_to="r@example.net", mail_from="a@example.com", status=status,
                      created_at=created)
    db.add(message)
    db.flush()
    db.add(Delivery(message_id=message.id, status="Sent", created_at=created))
    db.add(MessageEvent(message_id=message.id, server_id=server_id, event="MessageSent",
                        uuid=unique("ev"), created_at=created))
    return message.id


def test_old_mail_is_pruned_but_pending_and_recent_mail_stays(api, tenant):
    server_id = _server_id(tenant)
    with all_tenants() as db:
        db.get(Server, server_id).message_retention_days = 7
        old_sent = _mail(db, server_id, 8, "Sent")
        old_pending = _mail(db, server_id, 8, "SoftFail")
        recent = _mail(db, server_id, 2, "Sent")
    retention.run()
    with all_tenants() as db:
        assert db.get(Message, old_sent) is None
        assert db.scalar(select(Delivery).where(Delivery.message_id == old_sent)) is None
        assert db.scalar(select(MessageEvent).where(MessageEvent.message_id == old_sent)) is None
        assert db.get(Message, old_pending) is not None
        assert db.get(Message, recent) is not None


def test_spent_sessions_and_lapsed_suppressions_are_removed(api, tenant):
    server_id = _server_id(tenant)
    with all_tenants() as db:
        user = User(email_address=f"{unique('u')}@example.com")
        db.add(user)
        db.flush()
        expired = UserSession(user_id=user.id, token_hash=hash_secret(generate_secret()),
                              expires_at=clock.now() - timedelta(days=3))
        live = UserSession(user_id=user.id, token_hash=hash_secret(generate_secret()),
                           expires_at=clock.now() + timedelta(days=3))
        lapsed = Suppression(server_id=server_id, address=f"{unique('s')}@x.example",
                             expires_at=clock.now() - timedelta(days=2))
        standing = Suppression(server_id=server_id, address=f"{unique('s')}@x.example",
                               expires_at=None)
        db.add_all([expired, live, lapsed, standing])
        db.flush()
        ids = (expired.id, live.id, lapsed.id, standing.id)
    retention.run()
    with all_tenants() as db:
        assert db.get(UserSession, ids[0]) is None and db.get(UserSession, ids[1]) is not None
        assert db.get(Suppression, ids[2]) is None and db.get(Suppression, ids[3]) is not None


def test_old_idempotency_keys_finished_bulk_jobs_go_and_scheduled_mail_stays(api, tenant):
    from chalicelib.db.models import BulkJob, IdempotencyKey

    server_id = _server_id(tenant)
    now = clock.now()
    with all_tenants() as db:
        db.get(Server, server_id).message_retention_days = 7
        scheduled = _mail(db, server_id, 8, "Scheduled")  # due later: work still pending
        db.add_all([IdempotencyKey(server_id=server_id, key="old", request_hash="h",
                                   created_at=now - timedelta(days=3)),
                    IdempotencyKey(server_id=server_id, key="recent", request_hash="h",
                                   created_at=now - timedelta(hours=20))])
        for key, finished in (("old", now - timedelta(days=31)), ("recent", now)):
            db.add(BulkJob(server_id=server_id, action="cancel", filter={"tag": key},
                           status="Done", max_message_id=0, finished_at=finished))
    retention.run()
    with all_tenants() as db:
        assert db.get(Message, scheduled) is not None
        keys = set(db.scalars(select(IdempotencyKey.key).where(
            IdempotencyKey.server_id == server_id)))
        jobs = [j.filter["tag"] for j in db.scalars(select(BulkJob).where(
            BulkJob.server_id == server_id))]
        assert keys == {"recent"} and jobs == ["recent"]


def test_dmarc_reports_go_with_their_rows_after_their_retention(api, tenant, monkeypatch):
    from chalicelib.db.models import DmarcRecord, DmarcReport, Domain
    from chalicelib.services.dmarc import intake
    from tests.dmarc import samples

    monkeypatch.setenv("DMARC_REPORT_RETENTION_DAYS", "30")
    day = clock.now().replace(hour=0, minute=0, second=0, microsecond=0)
    with all_tenants() as db:
        domain_id = db.scalar(select(Domain.id).where(Domain.name == tenant.domain))
        ids = [intake.store(db, domain_id, intake.read(samples.mail(
            sender, "dmarc+x@rp.example", tenant.domain, day - timedelta(days=age)))).id
            for sender, age in (("google", 31), ("outlook", 29))]
    retention.run()
    with all_tenants() as db:
        assert list(db.scalars(select(DmarcReport.id).where(DmarcReport.domain_id == domain_id))) \
            == ids[1:]
        assert set(db.scalars(select(DmarcRecord.report_id)
                              .where(DmarcRecord.domain_id == domain_id))) == {ids[1]}


def test_expired_mail_frames_of_every_server_go(api, tenant):
    """A server that issues no frame after its last one expired never clears it itself (it
    deletes only its own rows when it issues one): retention does, for every server."""
    from chalicelib.db.models import MailFrame
    from chalicelib.services.mailframes import frames

    template = Api.data(api.post("/api/v2/server/templates", {
        "name": "Framed", "subject": "s", "html_body": "<p>hi</p>"},
        server_key=tenant.api_key), 201)["template"]["permalink"]
    frame = Api.data(api.post("/api/v2/server/mail_frames", {"kind": "template",
                                                             "id": template},
                              server_key=tenant.api_key), 201)["mail_frame"]
    frame_id = int(frame["path"][len(frames.PATH_PREFIX):].split(".")[0])
    retention.run()
    with all_tenants() as db:
        assert db.get(MailFrame, frame_id) is not None  # not expired yet
    clock.advance(frames.TTL + timedelta(seconds=1))
    retention.run()
    with all_tenants() as db:
        assert db.get(MailFrame, frame_id) is None
