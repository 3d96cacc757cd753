"""Helpers for tests of captured mail: a rich message (HTML, an image) submitted over SMTP."""
from __future__ import annotations

import base64
from email import policy
from email.message import EmailMessage

from tests.support.smtp import starttls_client

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really a png").decode()


def rich(tenant, to: str, subject: str = "Your invoice") -> bytes:
    """A mail as an application's mailer builds it: text and HTML alternatives, the HTML's
    logo as a related part named by Content-ID, and a CSV attached."""
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = f"App <app@{tenant.domain}>", to, subject
    mail.set_content("Invoice attached.")
    mail.add_alternative('<p style="color:#c00">Invoice <img src="cid:logo"> '
                         '<a href="https://shop.example.com/i/1">open</a></p>', subtype="html")
    mail.get_payload()[1].add_related(base64.b64decode(PIXEL), maintype="image",
                                      subtype="png", cid="<logo>")
    mail.add_attachment(b"item,amount\nwidget,3\n", maintype="text", subtype="csv",
                        filename="invoice.csv")
    return mail.as_bytes(policy=policy.SMTP)


def submit(stack, tenant, to: str, data: bytes) -> None:
    with starttls_client(stack.smtp_port) as client:
        client.login("any", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [to], data)
