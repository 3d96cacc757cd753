"""mime.to_seven_bit: an 8-bit message made 7-bit for a server without 8BITMIME (issue 32)."""
from __future__ import annotations

from email import message_from_bytes, policy

import pytest

from chalicelib.services import mime


def test_seven_bit_mail_is_left_alone():
    raw = b"From: a@b.example\r\nSubject: x\r\n\r\nhello\r\n"
    assert mime.to_seven_bit(raw) is raw


def test_text_goes_quoted_printable_other_parts_base64_containers_say_7bit():
    raw = ("From: a@b.example\r\nMIME-Version: 1.0\r\n"
           'Content-Type: multipart/mixed; boundary="XX"\r\n'
           "Content-Transfer-Encoding: 8bit\r\n\r\n"
           "--XX\r\nContent-Type: text/plain; charset=utf-8\r\n"
           "Content-Transfer-Encoding: 8bit\r\n\r\nGrüße  \r\n"
           "--XX\r\nContent-Type: text/plain\r\n\r\nplain ascii\r\n"
           "--XX\r\nContent-Type: application/octet-stream\r\n"
           "Content-Transfer-Encoding: binary\r\n\r\n").encode() + b"\xff\xfe\x00z" + \
        b"\r\n--XX--\r\n"
    converted = mime.to_seven_bit(raw)
    assert converted.isascii()
    assert b"\r\nplain ascii\r\n" in converted  # an ASCII part stays as it was
    parsed = message_from_bytes(converted, policy=policy.default)
    assert parsed["Content-Transfer-Encoding"] == "7bit"
    text, plain, binary = parsed.iter_parts()
    assert text["Content-Transfer-Encoding"] == "quoted-printable"
    assert text.get_content().replace("\r\n", "\n") == "Grüße  "  # the CRLF before a boundary is the boundary's
    assert binary["Content-Transfer-Encoding"] == "base64"
    assert binary.get_content() == b"\xff\xfe\x00z"


def test_utf8_headers_cannot_be_converted():
    raw = "From: Jörg <a@b.example>\r\n\r\nGrüße\r\n".encode()
    with pytest.raises(mime.NotConvertible, match="SMTPUTF8"):
        mime.to_seven_bit(raw)
