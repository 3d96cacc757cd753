"""mime.lines: lines over 998 octets made short by re-encoding only the parts that hold them."""
from __future__ import annotations

from email import message_from_bytes, policy

import pytest

from chalicelib.services.mime import lines


def test_a_message_without_long_lines_is_the_same_object():
    raw = b"From: a@example.com\r\nSubject: x\r\n\r\n" + b"y" * 998 + b"\r\n"
    assert lines.shorten_lines(raw) is raw


def test_only_the_part_with_the_long_line_changes_and_utf8_headers_stay_byte_for_byte():
    head = "From: Jörg <jörg@example.com>\r\nSubject: Grüße\r\nMIME-Version: 1.0\r\n" \
           "Content-Type: multipart/mixed; boundary=Z\r\n\r\n".encode()
    text = b"--Z\r\nContent-Type: text/plain\r\n\r\nshort\r\n"
    data = b"x" * 3000
    raw = head + text + b"--Z\r\nContent-Type: application/octet-stream\r\n\r\n" + data + \
        b"\r\n--Z--\r\n"
    out = lines.shorten_lines(raw)
    assert out.startswith(head + text) and lines.longest_line(out) <= 998
    [_, attachment] = message_from_bytes(out, policy=policy.default).iter_parts()
    assert attachment["Content-Transfer-Encoding"] == "base64"
    assert attachment.get_content() == data


@pytest.mark.parametrize("raw, where", [
    (b"From: a@example.com\r\nX-Long: " + b"x" * 1000 + b"\r\n\r\nbody\r\n", "a header line"),
    (b"From: a@example.com\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; "
     b"boundary=Z\r\n\r\n" + b"p" * 1200 + b"\r\n--Z\r\n\r\nx\r\n--Z--\r\n", "outside any part"),
])
def test_what_no_encoding_can_shorten_is_refused_naming_the_limit(raw, where):
    with pytest.raises(lines.LineTooLong) as refused:
        lines.shorten_lines(raw)
    assert where in str(refused.value) and "at most 998" in str(refused.value)
