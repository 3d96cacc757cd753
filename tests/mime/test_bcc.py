"""strip_bcc: every Bcc and Resent-Bcc field goes, however it is written; nothing else does."""
from __future__ import annotations

from chalicelib.services import mime


def test_every_form_of_bcc_is_removed_and_nothing_else():
    raw = (b"From: a@example.com\r\nbcc: One <one@example.com>,\r\n two@example.com\r\n"
           b"To: b@example.com\r\nBCC:three@example.com\r\nBcc :\r\n\tfour@example.com\r\n"
           b"Resent-Bcc: five@example.com\r\nX-Bcc: kept\r\nSubject: Bcc: kept\r\n\r\n"
           b"Bcc: body line kept\r\n")
    assert mime.strip_bcc(raw) == (b"From: a@example.com\r\nTo: b@example.com\r\n"
                                   b"X-Bcc: kept\r\nSubject: Bcc: kept\r\n\r\n"
                                   b"Bcc: body line kept\r\n")


def test_a_message_without_bcc_is_the_same_object():
    raw = b"From: a@example.com\r\nTo: b@example.com\r\n\r\nbcc: x@example.com\r\n"
    assert mime.strip_bcc(raw) is raw
    headers_only = b"From: a@example.com\r\nBcc: x@example.com\r\n"
    assert mime.strip_bcc(headers_only) == b"From: a@example.com\r\n"
    assert mime.strip_bcc(b"\r\nBcc: body\r\n") == b"\r\nBcc: body\r\n"
