"""Which message a feedback report (ARF, RFC 5965) is about, at every address the service
hands out: a domain's own return path (``<token>@rp.<domain>``, what mail goes out with once
its CNAME is verified), the installation's return path, and a feedback-loop address where
only the original's Message-ID names the message, embedded the ways providers embed it.
Each report goes over SMTP into the running gateway, and each match suppresses the
recipient with reason SpamComplaint."""
from __future__ import annotations

from email import message_from_bytes, policy

import pytest

from tests.support.inbound import arf, bounces, delivered, suppression_of
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support.smtp import plain_client, starttls_client
from tests.support import Api, unique, wait_for

FBL = "fbl-reports@mx.service.test"
WIRE = policy.compat32.clone(linesep="\r\n")


def redacted(raw: bytes, *names: str) -> bytes:
    """``raw`` without the named header fields, as providers redact a report's copy."""
    msg = message_from_bytes(raw, policy=policy.compat32)
    for name in names:
        del msg[name]
    return msg.as_bytes(policy=WIRE)


def folded_message_id(raw: bytes) -> bytes:
    """The Message-ID field folded onto its own continuation line (``Message-ID:`` CRLF SP
    ``<id>``), as some clients and providers write it."""
    assert b"\r\nMessage-ID: <" in raw
    return raw.replace(b"\r\nMessage-ID: <", b"\r\nMessage-ID:\r\n <", 1)


def report(stack, to: str, body: bytes) -> None:
    with plain_client(stack.smtp_port) as client:
        assert client.sendmail("fbl@mailbox-provider.example", [to], body) == {}


def assert_complaint(api, tenant, recipient: dict) -> None:
    [complaint] = wait_for(lambda: bounces(api, tenant), 10, message="complaint stored")
    assert complaint["bounce_type"] == "complaint"
    assert complaint["original_message_id"] == recipient["id"]
    [entry] = suppression_of(api, tenant, recipient["rcpt_to"])
    assert (entry["reason"], entry["origin"]) == ("SpamComplaint", "complaint")


def test_report_at_a_domain_return_path_is_matched_by_its_token(stack, api, tenant, mx):
    r, received, stored = delivered(api, tenant, mx)
    assert received.mail_from == f"{r['token']}@rp.{tenant.domain}"  # aligned, CNAME verified
    # Nothing but the address it was sent to names the message: no Message-ID, no recipient.
    original = redacted(stored, "Message-ID", "To", "Return-Path")
    report(stack, received.mail_from, arf(to=received.mail_from, original=original,
                                          headers_only=True))
    assert_complaint(api, tenant, r)


def test_report_at_the_installation_return_path_is_matched_by_its_token(stack, api, tenant,
                                                                         mx):
    path = tenant.server_path + f"/domains/{tenant.domain}"
    Api.data(api.patch(path, {"return_path_host": "bounces"}))  # unverified: not used yet
    r, received, stored = delivered(api, tenant, mx)
    assert received.mail_from == f"{r['token']}@rp.mx.service.test"
    original = redacted(stored, "Message-ID", "To", "Return-Path")
    report(stack, received.mail_from, arf(to=received.mail_from, original=original))
    assert_complaint(api, tenant, r)


@pytest.mark.parametrize("part", ["message/rfc822", "message/rfc822-headers",
                                  "text/rfc822-headers"])
def test_report_at_an_fbl_address_with_only_the_message_id(stack, api, tenant, mx,
                                                           monkeypatch, part):
    monkeypatch.setenv("FBL_ADDRESSES", FBL)
    r, received, stored = delivered(api, tenant, mx)
    # No Original-Mail-From, no Original-Rcpt-To, no Return-Path, no To: only the Message-ID,
    # folded, in angle brackets.
    original = folded_message_id(redacted(stored, "To", "Return-Path"))
    report(stack, FBL, arf(to=FBL, original=original, part=part))
    assert_complaint(api, tenant, r)


def test_a_report_that_cannot_say_which_recipient_complained_suppresses_nobody(
        stack, api, tenant, mx, monkeypatch):
    monkeypatch.setenv("FBL_ADDRESSES", FBL)
    first, second = rcpt("fbl"), rcpt("fbl")
    recipients = sent_ok(api, tenant, to=[first, second])["recipients"]
    for recipient in recipients:
        wait_status(api, tenant, recipient["id"], "Sent")
    [received] = wait_for(lambda: mx.received_for(first), 20, message="delivery")
    # One Message-ID, two recipients, both in To: nothing says who complained.
    original = redacted(received.data, "Return-Path")
    report(stack, FBL, arf(to=FBL, original=original, headers_only=True))
    # Once the report names the recipient, that one (and only that one) is suppressed.
    report(stack, FBL, arf(to=FBL, original=original, headers_only=True,
                           original_rcpt_to=second))
    by_address = {r["rcpt_to"]: r for r in recipients}
    assert_complaint(api, tenant, by_address[second])
    assert suppression_of(api, tenant, first) == []


@pytest.mark.usefixtures("clear_smtp_auth_failures")
def test_mail_submitted_over_smtp_with_a_folded_message_id_is_matched(stack, api, tenant,
                                                                       mx, monkeypatch):
    monkeypatch.setenv("FBL_ADDRESSES", FBL)
    to = rcpt("fbl")
    mid = f"{unique('folded')}.{'x' * 40}@{tenant.domain}"
    with starttls_client(stack.smtp_port) as client:
        client.login("any", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [to],
                        f"From: app@{tenant.domain}\r\nTo: {to}\r\nSubject: Hello\r\n"
                        f"Message-ID:\r\n <{mid}>\r\n\r\nHi\r\n".encode())
    [received] = wait_for(lambda: mx.received_for(to), 20, message="delivery")
    report(stack, FBL, arf(to=FBL, original=redacted(received.data, "To"),
                           part="text/rfc822-headers"))
    [complaint] = wait_for(lambda: bounces(api, tenant), 10, message="complaint stored")
    assert complaint["final_recipient"] == to
    [entry] = suppression_of(api, tenant, to)
    assert entry["reason"] == "SpamComplaint"
