"""Helpers for inbound tests: bounces (DSN) and complaints (ARF) written as mail servers send
them, a delivered message to answer, and the bounces and suppressions the API shows after."""
from __future__ import annotations

from tests.support import Api, wait_for
from tests.support.sending import SERVER, rcpt, sent_ok, wait_status


def arf(*, to: str, original: bytes, feedback_type: str = "abuse",
        original_mail_from: str | None = None, original_rcpt_to: str | None = None,
        headers_only: bool = False, part: str | None = None) -> bytes:
    """A feedback report as mailbox providers send them. ``part``: the content type of the
    third part (message/rfc822 or text/rfc822-headers by ``headers_only``); a ``-headers``
    type carries only the original's header."""
    fields = [f"Feedback-Type: {feedback_type}", "User-Agent: SomeMailboxProvider-FBL/1.0",
              "Version: 1", "Arrival-Date: Mon, 23 Nov 2026 08:00:00 +0000",
              "Source-IP: 192.0.2.25", "Reported-Domain: sender.example"]
    if original_mail_from:
        fields.append(f"Original-Mail-From: <{original_mail_from}>")
    if original_rcpt_to:
        fields.append(f"Original-Rcpt-To: <{original_rcpt_to}>")
    part = part or ("text/rfc822-headers" if headers_only else "message/rfc822")
    if part.endswith("-headers"):
        third = f"Content-Type: {part}\r\n\r\n".encode() + \
            original.split(b"\r\n\r\n", 1)[0] + b"\r\n"
    else:
        third = f"Content-Type: {part}\r\nContent-Disposition: inline\r\n\r\n".encode() + \
            original
    return (f"From: fbl@mailbox-provider.example\r\nTo: {to}\r\n"
            "Subject: Abuse report\r\nMIME-Version: 1.0\r\n"
            "Content-Type: multipart/report; report-type=feedback-report;\r\n"
            " boundary=\"ARF\"\r\n\r\n"
            "--ARF\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
            "This is an email abuse report for an email message received from IP 192.0.2.25."
            "\r\n\r\n--ARF\r\nContent-Type: message/feedback-report\r\n\r\n"
            + "\r\n".join(fields) + "\r\n\r\n--ARF\r\n").encode() + third + b"\r\n--ARF--\r\n"


def delivered(api, tenant, mx, **fields):
    to = rcpt("fbl")
    [r] = sent_ok(api, tenant, to=[to], **fields)["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    [received] = wait_for(lambda: mx.received_for(to), 20, message="delivery")
    # What the recipient's mailbox holds: the provider adds Return-Path on final delivery.
    stored = f"Return-Path: <{received.mail_from}>\r\n".encode() + received.data
    return r, received, stored


def bounces(api, tenant) -> list[dict]:
    return Api.data(api.get(f"{SERVER}/bounces", server_key=tenant.api_key))["bounces"]


def suppression_of(api, tenant, address: str) -> list[dict]:
    return Api.data(api.get(tenant.server_path + "/suppressions",
                            params={"query": address}))["suppressions"]


def dsn(return_path: str, original_rcpt: str, *, status="5.1.1", action="failed",
        diagnostic="smtp; 550 5.1.1 <{rcpt}>: Recipient address rejected: User unknown") -> bytes:
    diagnostic = diagnostic.format(rcpt=original_rcpt)
    return (f"From: MAILER-DAEMON@mx.recipient.example\r\nTo: {return_path}\r\n"
            "Subject: Undelivered Mail Returned to Sender\r\nMIME-Version: 1.0\r\n"
            "Content-Type: multipart/report; report-type=delivery-status; boundary=\"RR\"\r\n"
            "\r\n--RR\r\nContent-Type: text/plain\r\n\r\n"
            "I'm sorry to have to inform you that your message could not be delivered.\r\n"
            "\r\n--RR\r\nContent-Type: message/delivery-status\r\n\r\n"
            "Reporting-MTA: dns; mx.recipient.example\r\n"
            "Arrival-Date: Mon, 1 Jan 2024 10:00:00 +0000\r\n\r\n"
            f"Final-Recipient: rfc822; {original_rcpt}\r\nOriginal-Recipient: rfc822;"
            f" {original_rcpt}\r\nAction: {action}\r\nStatus: {status}\r\n"
            "Remote-MTA: dns; mail.recipient.example\r\n"
            f"Diagnostic-Code: {diagnostic}\r\n"
            "\r\n--RR\r\nContent-Type: text/rfc822-headers\r\n\r\n"
            f"From: app@sender.example\r\nTo: {original_rcpt}\r\nSubject: Hello\r\n"
            "\r\n--RR--\r\n").encode()
