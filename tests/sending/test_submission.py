"""The submission service called directly: SMTP-style raw submissions, storage once per
submission, recipients, holds and refusals."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from chalicelib import errors
from chalicelib.api.request_bodies.messages import SendRequest
from chalicelib.db.models import Message, MessageEvent, Server, Submission
from chalicelib.services import content
from chalicelib.services.organizations import credentials
from chalicelib.services.sending import submission
from chalicelib.services.suppressions import entries as suppressions
from tests.support import unique


@pytest.fixture
def server(db, tenant) -> Server:
    srv = credentials.authenticate_key(db, tenant.api_key, "API").server
    srv.domain_name = tenant.domain
    return srv


def raw_message(from_: str, body: bytes = b"Hello\nworld\n") -> bytes:
    return (f"From: App <{from_}>\nTo: someone@example.org\nSubject: raw test\n\n").encode() + body


def test_submit_raw_normalises_adds_ids_and_stores_once(db, server):
    to = [f"{unique('a')}@example.org", f"{unique('b')}@example.org"]
    result = submission.submit_raw(db, server, mail_from="bounce@elsewhere.example",
                                   rcpt_to=to + [to[0].upper()],
                                   raw=raw_message(f"app@{server.domain_name}",
                                                   b"line\r.\nbare\rcr\n"))
    db.flush()
    assert [r["rcpt_to"] for r in result["recipients"]] == to
    stored = db.get(Submission, result["message_id"])
    raw = content.source_bytes(db, stored.id)  # read through the content store
    assert stored.content_key and stored.size == len(raw)
    assert b"\n" not in raw.replace(b"\r\n", b"") and b"\r" not in raw.replace(b"\r\n", b"")
    # Added at the end of the header block (trace fields stay on top), as Postfix does.
    assert raw.startswith(b"From: App <")
    assert b"\r\nSubject: raw test\r\nDate: " in raw
    assert b"\r\nMessage-ID: <" in raw.split(b"\r\n\r\n")[0]
    assert raw.endswith(b"\r\n")
    messages = db.scalars(select(Message).where(Message.submission_id == stored.id)).all()
    assert len(messages) == 2 and {m.subject for m in messages} == {"raw test"}
    assert {m.mail_from for m in messages} == {f"app@{server.domain_name}"}
    assert all(m.message_id_header == stored.message_id_header for m in messages)
    assert db.scalar(select(func.count()).select_from(Submission)
                     .where(Submission.id == stored.id)) == 1


def test_submit_raw_authorizes_the_from_header_like_http(db, server):
    with pytest.raises(errors.ValidationError) as info:
        submission.submit_raw(db, server, mail_from=f"app@{server.domain_name}",
                              rcpt_to=["x@example.org"], raw=raw_message("app@not-ours.example"))
    assert info.value.field == "from"
    with pytest.raises(errors.ValidationError) as info:
        submission.submit_raw(db, server, mail_from="", rcpt_to=["x@example.org"],
                              raw=b"Subject: no from\r\n\r\nbody\r\n")
    assert info.value.field == "from"
    with pytest.raises(errors.ValidationError) as info:
        submission.submit_raw(db, server, mail_from="", rcpt_to=["bad address"],
                              raw=raw_message(f"app@{server.domain_name}"))
    assert info.value.field == "rcpt_to[0]"


def test_submit_raw_enforces_the_size_limit(db, server, monkeypatch):
    monkeypatch.setenv("SMTP_SERVER_MAX_MESSAGE_SIZE", "1KB")
    with pytest.raises(errors.ValidationError, match="max_message_size"):
        submission.submit_raw(db, server, mail_from="", rcpt_to=["x@example.org"],
                              raw=raw_message(f"app@{server.domain_name}", b"x" * 2000))


def test_suppressed_recipient_held_with_event_and_not_enqueued(db, server):
    held = f"{unique('h')}@example.org"
    suppressions.suppress(db, server.id, held.upper(), reason="Manual", origin="manual",
                          details="complained")
    assert suppressions.is_suppressed(db, server.id, held)
    request = SendRequest.model_validate({"from": f"app@{server.domain_name}", "to": [held],
                                          "text_body": "x"})
    result = submission.submit(db, server, request)
    db.flush()
    message = db.get(Message, result["recipients"][0]["id"])
    assert message.status == "Held" and message.held and message.next_attempt_at is None
    events = db.scalars(select(MessageEvent.event).where(MessageEvent.message_id == message.id))
    assert list(events) == ["MessageHeld"]
    assert not any("deliveries" in repr(cb) for cb in db.info.get("after_commit", [])) or \
        len(db.info.get("after_commit", [])) == 0


def test_automatic_suppressions_expire(db, server, monkeypatch):
    from datetime import timedelta

    from chalicelib import clock

    monkeypatch.setenv("SUPPRESSION_EXPIRY_DAYS", "2")
    address = f"{unique('e')}@example.org"
    row = suppressions.suppress(db, server.id, address, reason="HardBounce", origin="hard_fail",
                                details="hard failure")
    assert row.expires_at is not None
    clock.advance(timedelta(days=3))
    assert not suppressions.is_suppressed(db, server.id, address)


def test_suspended_server_refused(db, server):
    from chalicelib import clock

    server.suspended_at = clock.now()
    request = SendRequest.model_validate({"from": f"app@{server.domain_name}",
                                          "to": ["x@example.org"], "text_body": "x"})
    with pytest.raises(errors.ServerSuspended):
        submission.submit(db, server, request)
    with pytest.raises(errors.ServerSuspended):
        submission.submit_raw(db, server, mail_from="", rcpt_to=["x@example.org"],
                              raw=raw_message(f"app@{server.domain_name}"))
    db.rollback()


@pytest.mark.parametrize("recipients_per_entry", [(1,), (1, 3, 2), (4, 1)])
def test_many_submissions_map_every_message_to_its_own_submission(db, server,
                                                                    recipients_per_entry):
    """On PostgreSQL this is submission_store's single statement (arrays + unnest), whose
    RETURNING order is not promised: ids must still come back to the right entries."""
    from chalicelib.db.models import StatCounter

    def pending_today() -> int:
        return db.scalar(select(func.coalesce(func.sum(StatCounter.count), 0)).where(
            StatCounter.server_id == server.id, StatCounter.metric == "status:Pending",
            StatCounter.dim == "", StatCounter.period == "day")) or 0

    before = pending_today()
    parsed = []
    for n, count in enumerate(recipients_per_entry):
        to = [f"{unique(f'e{n}r{i}')}@example.org" for i in range(count)]
        parsed.append(submission.parse_raw(
            rcpt_to=to, raw=raw_message(f"app@{server.domain_name}", f"entry {n}\n".encode())))
    results = submission.submit_parsed_many(db, server.id, parsed)
    db.flush()
    assert len({r["message_id"] for r in results}) == len(parsed)
    for entry, result in zip(parsed, results):
        stored = db.get(Submission, result["message_id"])
        assert content.source_bytes(db, stored.id).endswith(f"entry {parsed.index(entry)}\r\n".encode())
        assert [r["rcpt_to"] for r in result["recipients"]] == entry.recipients
        for recipient in result["recipients"]:
            message = db.get(Message, recipient["id"])
            assert (message.submission_id, message.rcpt_to, message.token) == \
                (stored.id, recipient["rcpt_to"], recipient["token"])
            assert message.status == "Pending" and message.metadata_json is None
    assert pending_today() - before == sum(recipients_per_entry)


def test_metadata_and_tag_survive_the_bulk_write(db, server):
    request = SendRequest.model_validate({
        "from": f"app@{server.domain_name}", "to": [f"{unique('m')}@example.org"],
        "subject": "s", "text_body": "t", "tag": "welcome",
        "metadata": {"order": 42, "nested": {"ok": True}, "text": "é\"'"}})
    result = submission.submit(db, server, request)
    db.flush()
    message = db.get(Message, result["recipients"][0]["id"])
    assert message.metadata_json == {"order": 42, "nested": {"ok": True}, "text": "é\"'"}
    assert message.tag == "welcome"
