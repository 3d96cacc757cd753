"""Reading bounces and feedback reports without a database: non-standard bounces from their
own words (written here in the formats of Exchange, qmail, Domino and old Sendmail), delay
warnings and auto-replies, broken MIME, authentication-failure reports and forwarded
complaints."""
from __future__ import annotations

from chalicelib.services.failures import AT_ONCE, NEVER
from chalicelib.services.inbound import bounces, complaints

ORIGINAL = ("From: app@sender.example\r\nTo: ann@example.net\r\nSubject: Hello\r\n"
            "Message-ID: <m1@sender.example>\r\nX-Virus-Scanned: clean\r\n\r\nHi\r\n")


def mixed(text: str, subject: str = "Undeliverable: Hello", headers: str = "") -> bytes:
    return (f"From: postmaster@example.net\r\nTo: bounce@rp.sender.example\r\n"
            f"Subject: {subject}\r\n{headers}MIME-Version: 1.0\r\n"
            "Content-Type: multipart/mixed; boundary=\"B\"\r\n\r\n"
            f"--B\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n{text}\r\n"
            f"--B\r\nContent-Type: message/rfc822\r\n\r\n{ORIGINAL}\r\n--B--\r\n").encode()


def plain(text: str, subject: str = "failure notice", headers: str = "") -> bytes:
    return (f"From: MAILER-DAEMON@example.net\r\nTo: bounce@rp.sender.example\r\n"
            f"Subject: {subject}\r\n{headers}\r\n{text}").encode()


def test_exchange_without_a_code_says_unknown_recipient():
    report = bounces.parse_dsn(mixed(
        "Your message\r\n\r\n  To: ann@example.net\r\n  Subject: Hello\r\n\r\n"
        "did not reach the following recipient(s):\r\n\r\nann@example.net on 1 Jan 2024\r\n"
        "    The recipient name is not recognized\r\n"
        "    MSEXCH:IMS:EXAMPLE 0 (000C05A6) Unknown Recipient\r\n"))
    assert report["type"] == "hard" and not report["dsn"]
    assert report["reason"] == "no_such_user" and report["suppression"] == AT_ONCE


def test_qmail_basic_code_and_its_words():
    report = bounces.parse_dsn(plain(
        "Hi. This is the qmail-send program at example.net.\n"
        "I'm afraid I wasn't able to deliver your message to the following addresses.\n"
        "This is a permanent error; I've given up. Sorry it didn't work out.\n\n"
        "<ann@example.net>:\n192.0.2.1 does not like recipient.\n"
        "Remote host said: 550 5.7.1 Service unavailable; client host [192.0.2.9] blocked "
        "using bl.spamcop.net\nGiving up on 192.0.2.1.\n\n"
        "--- Below this line is a copy of the message.\n\n" + ORIGINAL))
    assert report["type"] == "hard" and report["status"] == "5.7.1"
    assert report["reason"] == "block_list" and report["suppression"] == NEVER
    assert report["blames"] == "ip"
    assert "blocked using" in report["diagnostic"]


def test_old_sendmail_user_unknown_next_to_a_bare_550():
    report = bounces.parse_dsn(plain(
        "The original message was received at Mon, 1 Jan 2024 from localhost\n\n"
        "   ----- The following addresses had permanent fatal errors -----\n<ann@example.net>\n"
        "\n   ----- Transcript of session follows -----\n"
        "550 <ann@example.net>... User unknown\n\n   ----- Original message follows -----\n"
        + ORIGINAL, subject="Returned mail: User unknown"))
    assert report["type"] == "hard" and report["status"] is None
    assert report["reason"] == "no_such_user" and report["suppression"] == AT_ONCE
    assert report["diagnostic"] == "550 <ann@example.net>... User unknown"


def test_the_returned_original_is_never_read_as_the_reason():
    # the original mentions a virus scan and spam; the bounce itself says: mailbox full
    report = bounces.parse_dsn(mixed(
        "Delivery has failed to these recipients:\r\nann@example.net\r\n"
        "The recipient's mailbox is full and can't accept messages now.\r\n"))
    assert report["reason"] == "mailbox_full"


def test_delay_warnings_and_auto_replies():
    delay = bounces.parse_dsn(plain(
        "THIS IS A WARNING MESSAGE ONLY.\nYOU DO NOT NEED TO RESEND YOUR MESSAGE.\n\n"
        "Delivery to the following recipient has been delayed:\n\n   ann@example.net\n",
        subject="Delivery Status Notification (Delay)"))
    assert delay["type"] == "soft"
    away = bounces.parse_dsn(plain("I am out of the office until Monday.",
                                   subject="Automatic reply: Hello",
                                   headers="Auto-Submitted: auto-replied\r\n"))
    assert away["type"] is None and away["reason"] is None


def test_a_report_with_a_broken_boundary_is_read_from_its_fields():
    raw = ("From: MAILER-DAEMON@example.net\r\nSubject: Undelivered Mail Returned to Sender\r\n"
           "MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status;"
           " boundary=\"not-the-one\"\r\n\r\n--the-one\r\nContent-Type: text/plain\r\n\r\n"
           "This is the mail system.\r\n\r\n--the-one\r\n"
           "Content-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.net\r\n"
           "\r\nFinal-Recipient: rfc822; ann@example.net\r\nAction: failed\r\nStatus: 5.1.1\r\n"
           "Diagnostic-Code: smtp; 550 5.1.1 The email account that you tried to reach does "
           "not exist.\r\n\r\n--the-one--\r\n").encode()
    report = bounces.parse_dsn(raw)
    assert report["dsn"] and report["status"] == "5.1.1" and report["action"] == "failed"
    assert report["reason"] == "no_such_user"


def arf(feedback_type: str, part_type: str = "message/rfc822") -> bytes:
    return ("From: fbl@provider.example\r\nTo: fbl@sender.example\r\nSubject: report\r\n"
            "MIME-Version: 1.0\r\nContent-Type: multipart/report; "
            "report-type=feedback-report; boundary=\"F\"\r\n\r\n"
            "--F\r\nContent-Type: text/plain\r\n\r\nA report.\r\n"
            "--F\r\nContent-Type: message/feedback-report\r\n\r\n"
            f"Feedback-Type: {feedback_type}\r\nUser-Agent: provider/1.0\r\nVersion: 1\r\n"
            "Original-Mail-From: <bounce@rp.sender.example>\r\n"
            "Auth-Failure: dmarc\r\n\r\n"
            f"--F\r\nContent-Type: {part_type}\r\n\r\n{ORIGINAL}\r\n--F--\r\n").encode()


def test_auth_failure_reports_are_not_complaints():
    report = complaints.parse(arf("auth-failure"))
    assert report["type"] == "auth_failure" and report["category"] == "auth_failure"
    assert complaints.parse(arf("abuse"))["type"] == "complaint"


def test_returned_headers_in_every_part_type_providers_use():
    for part_type in ("text/rfc822-headers", "text/rfc822-header", "message/rfc822-headers",
                      "message/rfc822"):
        report = complaints.parse(arf("abuse", part_type))
        assert report["original_message_id"] == "m1@sender.example", part_type


def test_a_forwarded_complaint_is_recognised():
    raw = mixed("A complaint about a message you sent.",
                subject="complaint about message from 192.0.2.9")
    report = complaints.parse(raw)
    assert report["type"] == "complaint" and report["forwarded"]
    assert report["feedback_type"] == "abuse"
    assert report["original_message_id"] == "m1@sender.example"
    # an ordinary bounce is not a complaint
    assert complaints.parse(mixed("did not reach the following recipient(s)")) is None
