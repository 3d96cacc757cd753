"""A delivery status notification as Postfix writes one (its bounce(8) template and
``multipart/report`` layout, the returned message attached as ``message/rfc822``), for
tests that send bounces to the gateway over SMTP the way a Postfix MX would."""
from __future__ import annotations

from email.utils import format_datetime
from datetime import datetime, timezone


def postfix_dsn(return_path: str, rcpt: str, original: bytes, *, status: str = "5.1.1",
                action: str = "failed", remote: str = "mail.recipient.example",
                reply: str | None = None, host: str = "mx.recipient.example") -> bytes:
    """The DSN Postfix at ``host`` sends to ``return_path`` when ``remote`` answered
    ``reply`` for ``rcpt`` (default: a user unknown) for the message ``original``."""
    reply = reply or (f"550 5.1.1 <{rcpt}>: Recipient address rejected: User unknown in "
                      "virtual mailbox table")
    boundary = f"4ZkQ2x1TjXz9v.1732838400/{host}"
    date = format_datetime(datetime(2024, 11, 29, 0, 0, tzinfo=timezone.utc))
    said = f"host {remote}[192.0.2.25] said: {reply} (in reply to RCPT TO command)"
    lines = [
        "Return-Path: <>",
        f"Received: by {host} (Postfix) id 4ZkQ2x1TjXz9v; {date}",
        f"Date: {date}",
        f"From: MAILER-DAEMON@{host} (Mail Delivery System)",
        "Subject: Undelivered Mail Returned to Sender",
        f"To: {return_path}",
        "Auto-Submitted: auto-replied",
        "MIME-Version: 1.0",
        f'Content-Type: multipart/report; report-type=delivery-status;\r\n\tboundary="{boundary}"',
        "Content-Transfer-Encoding: 8bit",
        f"Message-Id: <20241129000000.4ZkQ2x1TjXz9v@{host}>",
        "",
        "This is a MIME-encapsulated message.",
        "",
        f"--{boundary}",
        "Content-Description: Notification",
        "Content-Type: text/plain; charset=utf-8",
        "Content-Transfer-Encoding: 8bit",
        "",
        f"This is the mail system at host {host}.",
        "",
        "I'm sorry to have to inform you that your message could not",
        "be delivered to one or more recipients. It's attached below.",
        "",
        "For further assistance, please send mail to postmaster.",
        "",
        "If you do so, please include this problem report. You can",
        "delete your own text from the attached returned message.",
        "",
        "                   The mail system",
        "",
        f"<{rcpt}>: {said}",
        "",
        f"--{boundary}",
        "Content-Description: Delivery report",
        "Content-Type: message/delivery-status",
        "",
        f"Reporting-MTA: dns; {host}",
        "X-Postfix-Queue-ID: 4ZkQ2x1TjXz9v",
        f"X-Postfix-Sender: rfc822; {return_path}",
        f"Arrival-Date: {date}",
        "",
        f"Final-Recipient: rfc822; {rcpt}",
        f"Original-Recipient: rfc822;{rcpt}",
        f"Action: {action}",
        f"Status: {status}",
        f"Remote-MTA: dns; {remote}",
        f"Diagnostic-Code: smtp; {reply}",
        "",
        f"--{boundary}",
        "Content-Description: Undelivered Message",
        "Content-Type: message/rfc822",
        "Content-Transfer-Encoding: 8bit",
        "",
    ]
    head = "\r\n".join(lines).encode() + b"\r\n"
    return head + original.rstrip(b"\r\n") + f"\r\n\r\n--{boundary}--\r\n".encode()
