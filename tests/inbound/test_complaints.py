"""Spam complaints: real ARF reports (RFC 5965) sent over SMTP to the gateway, at a message's
return path or at a feedback-loop address, are matched to the message, stored like bounces
(bounce_type complaint) and suppress the recipient on every stream (reason SpamComplaint)."""
from __future__ import annotations

import email
import json
from email import policy

from tests.support.smtp import plain_client
from tests.support.observability import metrics
from tests.support.sending import message, sent_ok
from tests.support import Api, wait_for
from tests.support.inbound import arf, bounces, delivered, suppression_of

SERVER = "/api/v2/server"










def test_report_at_the_return_path_is_stored_and_suppresses(stack, api, tenant, mx):
    r, received, stored = delivered(api, tenant, mx)
    report = arf(to=received.mail_from, original=stored,
                 original_mail_from=received.mail_from, original_rcpt_to=r["rcpt_to"])
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], report)
    [complaint] = bounces(api, tenant)
    assert complaint["bounce_type"] == "complaint" and complaint["category"] == "complaint"
    assert complaint["original_message_id"] == r["id"]
    assert complaint["final_recipient"] == r["rcpt_to"]
    assert complaint["complaint"]["feedback_type"] == "abuse"
    assert complaint["complaint"]["user_agent"] == "SomeMailboxProvider-FBL/1.0"
    assert complaint["complaint"]["source_ip"] == "192.0.2.25"
    # The original was delivered: its status stays.
    assert message(api, tenant, r["id"])["status"] == "Sent"
    [entry] = suppression_of(api, tenant, r["rcpt_to"])
    assert entry["reason"] == "SpamComplaint" and entry["origin"] == "complaint"
    assert entry["stream"] is None and entry["expires_at"] is None
    # Every stream of the server holds the recipient now.
    news = Api.data(api.post(f"{SERVER}/streams", {"name": "News", "stream_type": "broadcast"},
                             server_key=tenant.api_key), 201)["stream"]["permalink"]
    for stream in (None, news):
        extra = {"stream": stream} if stream else {}
        [again] = sent_ok(api, tenant, to=[r["rcpt_to"]], **extra)["recipients"]
        assert again["status"] == "Held"
    stats = Api.data(api.get(f"{SERVER}/stats", server_key=tenant.api_key))["stats"]
    assert stats["complaints"] == 1
    only = Api.data(api.get(f"{SERVER}/bounces", params={"category": "complaint"},
                            server_key=tenant.api_key))["bounces"]
    assert [b["id"] for b in only] == [complaint["id"]]
    assert Api.data(api.get(f"{SERVER}/bounces", params={"category": "unknown_user"},
                            server_key=tenant.api_key))["bounces"] == []


def test_report_at_the_fbl_address_matched_by_message_id(stack, api, tenant, mx, monkeypatch):
    monkeypatch.setenv("FBL_ADDRESSES", "fbl@mx.service.test, abuse-reports@mx.service.test")
    r, received, stored = delivered(api, tenant, mx)
    message_id = email.message_from_bytes(received.data, policy=policy.compat32)["Message-ID"]
    assert message_id
    # Redacted: no return path, no envelope sender; only the headers of the original.
    redacted = b"\r\n".join(line for line in stored.split(b"\r\n")
                            if not line.lower().startswith(b"return-path"))
    report = arf(to="abuse-reports@mx.service.test", original=redacted, headers_only=True,
                 original_rcpt_to=r["rcpt_to"])
    with plain_client(stack.smtp_port) as client:
        refused = client.sendmail("fbl@mailbox-provider.example",
                                  ["ABUSE-REPORTS@mx.service.test"], report)
        assert refused == {}
    [complaint] = wait_for(lambda: bounces(api, tenant), 10, message="complaint stored")
    assert complaint["original_message_id"] == r["id"]
    assert complaint["rcpt_to"] == "ABUSE-REPORTS@mx.service.test"
    [entry] = suppression_of(api, tenant, r["rcpt_to"])
    assert entry["reason"] == "SpamComplaint"


def test_not_spam_is_recorded_without_suppressing(stack, api, tenant, mx):
    r, received, stored = delivered(api, tenant, mx)
    report = arf(to=received.mail_from, original=stored, feedback_type="not-spam")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], report)
    [complaint] = bounces(api, tenant)
    assert complaint["complaint"]["feedback_type"] == "not-spam"
    assert suppression_of(api, tenant, r["rcpt_to"]) == []


def test_unmatched_report_at_the_fbl_address_is_accepted_and_dropped(stack, api, tenant,
                                                                    monkeypatch):
    monkeypatch.setenv("FBL_ADDRESSES", "fbl@mx.service.test")
    original = (b"From: someone@else.example\r\nTo: x@example.net\r\n"
                b"Message-ID: <never-sent@else.example>\r\nSubject: x\r\n\r\nbody\r\n")
    with plain_client(stack.smtp_port) as client:
        assert client.sendmail("", ["fbl@mx.service.test"],
                               arf(to="fbl@mx.service.test", original=original)) == {}
        # Without FBL_ADDRESSES naming it, the address is nobody's: no open relay.
        code, _ = client.docmd("MAIL FROM:<>")
        code, _ = client.docmd("RCPT TO:<other@mx.service.test>")
        assert code in (530, 550)
    assert bounces(api, tenant) == []


def test_complaints_are_counted_and_logged_without_the_recipient(stack, api, tenant, mx, logs):
    """A spam report adds to MessagesComplained (GET /metrics) and writes a complaint.received
    line naming the message, not the person; a not-spam report is logged, not counted."""
    before = metrics(api)["email_service_complained_total"]
    r, received, stored = delivered(api, tenant, mx)
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received.mail_from], arf(to=received.mail_from, original=stored))
    line = logs.wait("complaint.received", token=r["token"])
    assert line["level"] == "WARNING"
    assert (line["original_message_id"], line["feedback_type"], line["suppressed"]) == \
        (r["id"], "abuse", True)
    [complaint] = bounces(api, tenant)
    assert line["complaint_id"] == complaint["id"]
    assert metrics(api)["email_service_complained_total"] == before + 1

    second, received2, stored2 = delivered(api, tenant, mx)
    with plain_client(stack.smtp_port) as client:
        client.sendmail("", [received2.mail_from],
                        arf(to=received2.mail_from, original=stored2, feedback_type="not-spam"))
    quiet = logs.wait("complaint.received", token=second["token"])
    assert (quiet["level"], quiet["feedback_type"], quiet["suppressed"]) == \
        ("INFO", "not-spam", False)
    assert metrics(api)["email_service_complained_total"] == before + 1
    for written, to in ((line, r["rcpt_to"]), (quiet, second["rcpt_to"])):
        assert to.lower() not in json.dumps(written).lower()
