"""Tests for chalicelib.services.mime: safe RFC 5322 message building."""
from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta, timezone
from email import policy
from email.parser import BytesParser

import pytest

from chalicelib.services.mime import (
    OWNED_HEADERS,
    Address,
    InvalidField,
    MessageBuildError,
    build_message,
    check_wire_format,
    decode_attachment,
    header_addresses,
    message_size,
    normalize_line_endings,
    parse_address,
    parse_address_list,
    validate_custom_headers,
)

FROM = Address("sender@example.com", "Sender")


def build(**overrides):
    kwargs = dict(
        from_=FROM,
        to=[Address("rcpt@example.org")],
        cc=[],
        reply_to=[],
        subject="Hello",
        text_body="Hello there",
        html_body=None,
        headers=[],
        attachments=[],
        message_id_domain="mail.example.com",
    )
    kwargs.update(overrides)
    return build_message(**kwargs)


def parse(raw: bytes):
    return BytesParser(policy=policy.default).parsebytes(raw)


def lines(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\r\n")
    return raw[:-2].split(b"\r\n")


def assert_wire_safe(raw: bytes) -> None:
    # only CRLF line endings: removing every CRLF leaves no CR or LF at all
    stripped = raw.replace(b"\r\n", b"")
    assert b"\r" not in stripped and b"\n" not in stripped
    assert max(len(line) for line in lines(raw)) <= 998
    assert raw.isascii()
    for marker in (b"\r\n.\r\n", b"\n.\n", b"\r.\r", b"\n.\r\n", b"\r.\n"):
        assert marker not in raw
    check_wire_format(raw)


def raw_header_lines(raw: bytes) -> list[bytes]:
    head = raw.split(b"\r\n\r\n", 1)[0]
    return head.split(b"\r\n")


# --------------------------------------------------------------------------------------------
# Addresses


class TestParseAddress:
    def test_bare(self):
        assert parse_address("a@example.com", "to[0]") == Address("a@example.com", None)

    def test_name_and_address(self):
        assert parse_address("Jane Doe <jane@example.com>", "to[0]") == Address(
            "jane@example.com", "Jane Doe"
        )

    def test_quoted_name_with_specials(self):
        addr = parse_address('"Doe, Jane \\"JD\\"" <jane@example.com>', "to[0]")
        assert addr == Address("jane@example.com", 'Doe, Jane "JD"')

    def test_unquoted_unicode_name(self):
        addr = parse_address("Jörg Müller <jorg@example.com>", "to[0]")
        assert addr.name == "Jörg Müller"

    def test_dict(self):
        addr = parse_address({"email": "a@example.com", "name": "A"}, "cc[1]")
        assert addr == Address("a@example.com", "A")

    def test_dict_without_name(self):
        assert parse_address({"email": "a@example.com"}, "cc[1]").name is None

    def test_blank_name_is_none(self):
        assert parse_address({"email": "a@example.com", "name": "  "}, "cc[1]").name is None

    def test_domain_lowercased_local_part_kept(self):
        addr = parse_address("John.Smith@EXAMPLE.Com", "to[0]")
        assert addr.email == "John.Smith@example.com"
        assert addr.domain == "example.com"

    def test_idn_domain_becomes_punycode(self):
        addr = parse_address({"email": "user@Bücher.de", "name": "B"}, "to[0]")
        assert addr.email == "user@xn--bcher-kva.de"
        assert addr.email.isascii()

    def test_non_ascii_local_part_is_internationalized_mail(self):
        """RFC 6531 (it was refused): the local part kept in Unicode NFC, the domain as its
        A-label; such an address needs SMTPUTF8."""
        import unicodedata

        addr = parse_address({"email": unicodedata.normalize("NFD", "Jörg@Bücher.de")}, "to[2]")
        assert addr.email == "Jörg@xn--bcher-kva.de" and addr.smtputf8
        assert not parse_address("jorg@bücher.de", "to").smtputf8
        assert addr.formatted() == "Jörg@xn--bcher-kva.de"

    @pytest.mark.parametrize("value", ["a" * 65 + "@example.com", "ü" * 33 + "@example.com",
                                       "jö rg@example.com", "jörg@@example.com"])
    def test_over_long_or_invalid_internationalized_addresses_refused(self, value):
        with pytest.raises(InvalidField) as exc:
            parse_address(value, "to[0]")
        assert exc.value.field == "to[0]" and "not a valid email address" in exc.value.message

    @pytest.mark.parametrize(
        "value", ["not-an-address", "a@b", "a@@example.com", "a@[127.0.0.1]", "a b@example.com"]
    )
    def test_invalid_syntax_names_field(self, value):
        with pytest.raises(InvalidField) as exc:
            parse_address({"email": value}, "to[2]")
        assert exc.value.field == "to[2].email"
        assert exc.value.message.startswith("is not a valid email address")

    def test_invalid_string_names_field(self):
        with pytest.raises(InvalidField) as exc:
            parse_address("nope", "reply_to[0]")
        assert exc.value.field == "reply_to[0]"

    @pytest.mark.parametrize(
        "value",
        [
            "a@example.com\r\nBcc: victim@example.org",
            "a@example.com\nBcc: victim@example.org",
            "a@example.com\r",
            "a@exa\x00mple.com",
            "Name\r\nBcc: x@y.com <a@example.com>",
        ],
    )
    def test_crlf_nul_in_string_refused(self, value):
        with pytest.raises(InvalidField) as exc:
            parse_address(value, "to[0]")
        assert exc.value.field == "to[0]"
        assert "CR, LF, NUL" in exc.value.message

    @pytest.mark.parametrize("name", ["Evil\r\nBcc: x@y.com", "Evil\nX", "Evil\rX", "Ev\x00il", "E\u2028vil"])
    def test_crlf_nul_in_name_refused(self, name):
        with pytest.raises(InvalidField) as exc:
            parse_address({"email": "a@example.com", "name": name}, "to[3]")
        assert exc.value.field == "to[3].name"

    def test_crlf_in_dict_email_refused(self):
        with pytest.raises(InvalidField) as exc:
            parse_address({"email": "a@example.com\r\nBcc: x@y.com"}, "to[3]")
        assert exc.value.field == "to[3].email"

    def test_missing_email(self):
        with pytest.raises(InvalidField) as exc:
            parse_address({"name": "x"}, "to[0]")
        assert exc.value.field == "to[0].email"
        assert exc.value.message == "is required"

    def test_unknown_key(self):
        with pytest.raises(InvalidField) as exc:
            parse_address({"email": "a@example.com", "bcc": "x"}, "to[0]")
        assert exc.value.field == "to[0]"

    def test_wrong_type(self):
        with pytest.raises(InvalidField) as exc:
            parse_address(42, "to[0]")
        assert exc.value.field == "to[0]"

    def test_angle_brackets_in_unquoted_name_refused(self):
        with pytest.raises(InvalidField):
            parse_address("a <b> <c@example.com>", "to[0]")

    def test_name_too_long(self):
        with pytest.raises(InvalidField) as exc:
            parse_address({"email": "a@example.com", "name": "x" * 300}, "to[0]")
        assert exc.value.field == "to[0].name"

    def test_formatted(self):
        assert Address("a@example.com").formatted() == "a@example.com"
        assert Address("a@example.com", "Jane Doe").formatted() == "Jane Doe <a@example.com>"
        assert Address("a@example.com", "Doe, Jane").formatted() == '"Doe, Jane" <a@example.com>'
        encoded = Address("a@example.com", "Jörg").formatted()
        assert encoded.isascii() and encoded.startswith("=?utf-8?") and encoded.endswith(" <a@example.com>")

    def test_address_invariants(self):
        with pytest.raises(ValueError):
            Address("a@example.com>, evil@example.org")
        with pytest.raises(ValueError):
            Address("a@example.com", "x\r\nBcc: y@z.com")


class TestParseAddressList:
    def test_indices_in_field(self):
        with pytest.raises(InvalidField) as exc:
            parse_address_list(["a@example.com", "b@example.com", {"email": "bad"}], "to")
        assert exc.value.field == "to[2].email"

    def test_list(self):
        result = parse_address_list(["a@example.com", {"email": "b@Example.com", "name": "B"}], "cc")
        assert result == [Address("a@example.com"), Address("b@example.com", "B")]

    def test_none_and_single(self):
        assert parse_address_list(None, "cc") == []
        assert parse_address_list("a@example.com", "cc") == [Address("a@example.com")]

    def test_not_a_list(self):
        with pytest.raises(InvalidField) as exc:
            parse_address_list(5, "bcc")
        assert exc.value.field == "bcc"


# --------------------------------------------------------------------------------------------
# Custom headers


class TestCustomHeaders:
    def test_valid(self):
        assert validate_custom_headers({"X-Campaign": "spring", "List-Unsubscribe": " <mailto:u@x.com> "}) == [
            ("X-Campaign", "spring"),
            ("List-Unsubscribe", "<mailto:u@x.com>"),
        ]

    def test_none(self):
        assert validate_custom_headers(None) == []

    def test_not_a_mapping(self):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers(["X-A"])
        assert exc.value.field == "headers"

    @pytest.mark.parametrize(
        "value", ["hi\r\nBcc: x@y.com", "hi\nBcc: x@y.com", "hi\rBcc: x@y.com", "a\x00b", "a\x0bb", "a\u2028b"]
    )
    def test_injection_in_value_refused(self, value):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers({"X-Foo": value})
        assert exc.value.field == "headers.X-Foo"

    @pytest.mark.parametrize("name", ["X-Foo\r\nBcc", "X-Foo\nBcc", "X Foo", "X-Foo:", "X-Fö", "", "X-\x00"])
    def test_bad_names_refused(self, name):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers({name: "v"})
        assert exc.value.field.startswith("headers")
        assert "\r" not in exc.value.field and "\n" not in exc.value.field

    @pytest.mark.parametrize("name", sorted(OWNED_HEADERS))
    def test_owned_headers_refused(self, name):
        for variant in (name, name.upper(), name.title()):
            with pytest.raises(InvalidField) as exc:
                validate_custom_headers({variant: "x"})
            assert exc.value.field == f"headers.{variant}"

    @pytest.mark.parametrize(
        "name",
        ["Subject", "SUBJECT", "bcc", "Reply-To", "Content-Language", "Resent-To", "X-Service-Id",
         "X-SES-Configuration-Set", "ARC-Seal", "DKIM-Signature", "Message-Id"],
    )
    def test_owned_examples(self, name):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers({name: "x"})
        assert exc.value.field == f"headers.{name}"

    def test_duplicate_in_other_case_refused(self):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers({"X-A": "1", "x-a": "2"})
        assert exc.value.field == "headers.x-a"

    def test_non_string_value(self):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers({"X-A": 1})
        assert exc.value.field == "headers.X-A"

    def test_custom_field_prefix(self):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers({"Bcc": "x"}, field="messages[3].headers")
        assert exc.value.field == "messages[3].headers.Bcc"


# --------------------------------------------------------------------------------------------
# Attachments


class TestDecodeAttachment:
    def test_ok(self):
        data = bytes(range(256)) * 3
        encoded = base64.encodebytes(data).decode()  # with newlines
        name, ctype, out = decode_attachment(
            {"name": "résumé.pdf", "content_type": "Application/PDF", "data_base64": encoded}, 0
        )
        assert (name, ctype, out) == ("résumé.pdf", "application/pdf", data)

    def test_empty_data_allowed(self):
        assert decode_attachment({"name": "e", "content_type": "text/plain", "data_base64": ""}, 0)[2] == b""

    @pytest.mark.parametrize("bad", ["abc", "ab!d", "YWJj$", "YW Jj=", "YWJj====", "-_-_", "YWJjZA=", "é"])
    def test_bad_base64(self, bad):
        with pytest.raises(InvalidField) as exc:
            decode_attachment({"name": "a", "content_type": "text/plain", "data_base64": bad}, 3)
        assert exc.value.field == "attachments[3].data_base64"

    @pytest.mark.parametrize("ctype", ["pdf", "text/", "/plain", "text/plain; charset=utf-8", "te xt/plain",
                                       "text/plain\r\nBcc: x", "multipart/mixed", "message/rfc822", ""])
    def test_bad_content_type(self, ctype):
        with pytest.raises(InvalidField) as exc:
            decode_attachment({"name": "a", "content_type": ctype, "data_base64": "YQ=="}, 1)
        assert exc.value.field == "attachments[1].content_type"

    @pytest.mark.parametrize("name", ["a\r\nContent-Type: text/html", "a\nb", "a\rb", "a\x00b", "", "   ", None])
    def test_bad_name(self, name):
        with pytest.raises(InvalidField) as exc:
            decode_attachment({"name": name, "content_type": "text/plain", "data_base64": "YQ=="}, 2)
        assert exc.value.field == "attachments[2].name"

    def test_missing_data(self):
        with pytest.raises(InvalidField) as exc:
            decode_attachment({"name": "a", "content_type": "text/plain"}, 0)
        assert exc.value.field == "attachments[0].data_base64"

    def test_not_a_mapping(self):
        with pytest.raises(InvalidField) as exc:
            decode_attachment("x", 4)
        assert exc.value.field == "attachments[4]"


# --------------------------------------------------------------------------------------------
# Line endings


class TestNormalizeLineEndings:
    @pytest.mark.parametrize(
        "data, expected",
        [
            (b"a\nb", b"a\r\nb"),
            (b"a\rb", b"a\r\nb"),
            (b"a\r\nb", b"a\r\nb"),
            (b"a\n\rb", b"a\r\n\r\nb"),
            (b"x\n.\ny", b"x\r\n.\r\ny"),
            (b"x\r.\ry", b"x\r\n.\r\ny"),
            (b"x\n.\r\ny", b"x\r\n.\r\ny"),
            (b"", b""),
        ],
    )
    def test_bytes(self, data, expected):
        assert normalize_line_endings(data) == expected

    def test_idempotent_and_str(self):
        once = normalize_line_endings(b"a\r\r\n\n\rb")
        assert normalize_line_endings(once) == once
        assert normalize_line_endings("a\nb\r") == "a\r\nb\r\n"


# --------------------------------------------------------------------------------------------
# Building


class TestBuildMessage:
    def test_text_only(self):
        raw, mid = build(text_body="Hello\nworld")
        msg = parse(raw)
        assert msg.get_content_type() == "text/plain"
        assert msg.get_content_charset() == "utf-8"
        assert msg.get_content().replace("\r\n", "\n") == "Hello\nworld\n"
        assert msg["MIME-Version"] == "1.0"
        assert_wire_safe(raw)

    def test_html_only(self):
        raw, _ = build(text_body=None, html_body="<p>Hi</p>")
        msg = parse(raw)
        assert msg.get_content_type() == "text/html"
        assert "<p>Hi</p>" in msg.get_content()

    def test_alternative(self):
        raw, _ = build(text_body="plain ☃", html_body="<b>html ☃</b>")
        msg = parse(raw)
        assert msg.get_content_type() == "multipart/alternative"
        parts = list(msg.iter_parts())
        assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
        assert parts[0].get_content().strip() == "plain ☃"
        assert parts[1].get_content().strip() == "<b>html ☃</b>"
        assert msg.get_body(preferencelist=("html",)).get_content().strip() == "<b>html ☃</b>"
        assert_wire_safe(raw)

    def test_mixed_with_alternative_and_attachments(self):
        data1 = bytes(range(256)) * 50
        data2 = b"a,b\r\n1,2\n.\r\n"
        raw, _ = build(
            text_body="see attached",
            html_body="<p>see attached</p>",
            attachments=[("report.bin", "application/octet-stream", data1), ("données é.csv", "text/csv", data2)],
        )
        msg = parse(raw)
        assert msg.get_content_type() == "multipart/mixed"
        parts = list(msg.iter_parts())
        assert [p.get_content_type() for p in parts] == [
            "multipart/alternative", "application/octet-stream", "text/csv"]
        assert [p.get_content_type() for p in parts[0].iter_parts()] == ["text/plain", "text/html"]
        attachments = list(msg.iter_attachments())
        assert [a.get_filename() for a in attachments] == ["report.bin", "données é.csv"]
        assert attachments[0].get_payload(decode=True) == data1
        assert attachments[1].get_payload(decode=True) == data2
        assert all(a.get_content_disposition() == "attachment" for a in attachments)
        assert b"filename*=utf-8''donn%C3%A9es%20%C3%A9.csv" in raw  # RFC 2231
        assert_wire_safe(raw)

    def test_mixed_with_single_body(self):
        raw, _ = build(text_body=None, html_body="<p>x</p>", attachments=[("a.txt", "text/plain", b"abc")])
        msg = parse(raw)
        parts = list(msg.iter_parts())
        assert [p.get_content_type() for p in parts] == ["text/html", "text/plain"]
        assert parts[0].get_content().strip() == "<p>x</p>"
        assert parts[1].get_filename() == "a.txt"

    def test_no_body_refused(self):
        with pytest.raises(InvalidField) as exc:
            build(text_body=None, html_body=None)
        assert exc.value.field == "text_body"

    def test_unicode_subject_round_trips(self):
        subject = "Ünïcödé — 日本語のテスト 🎉 " + "long words " * 20
        subject = subject.strip()
        raw, _ = build(subject=subject)
        assert b"=?utf-8?" in raw
        assert parse(raw)["Subject"] == subject
        assert_wire_safe(raw)

    @pytest.mark.parametrize("subject", ["y" * 2000, "see https://example.com/" + "p" * 1500 + " now", ""])
    def test_long_or_empty_ascii_subject(self, subject):
        raw, _ = build(subject=subject)
        assert_wire_safe(raw)
        assert parse(raw)["Subject"] == subject

    def test_ascii_subject_plain(self):
        raw, _ = build(subject="Your receipt #42")
        assert b"\r\nSubject: Your receipt #42\r\n" in raw

    def test_subject_looking_like_encoded_word_is_preserved(self):
        raw, _ = build(subject="=?utf-8?q?hi?=")
        assert parse(raw)["Subject"] == "=?utf-8?q?hi?="

    @pytest.mark.parametrize("subject", ["hi\r\nBcc: x@y.com", "hi\nBcc: x@y.com", "hi\rX", "a\x00", "a\x85b"])
    def test_subject_injection_refused(self, subject):
        with pytest.raises(InvalidField) as exc:
            build(subject=subject)
        assert exc.value.field == "subject"

    def test_no_subject(self):
        raw, _ = build(subject=None)
        assert "Subject" not in parse(raw)

    def test_unicode_display_names_encoded(self):
        to = parse_address_list([{"email": "j@example.org", "name": "Jörg Müller"}], "to")
        raw, _ = build(to=to, from_=Address("s@example.com", "Zoë"))
        head = raw.split(b"\r\n\r\n", 1)[0]
        assert head.isascii() and b"=?utf-8?" in head
        msg = parse(raw)
        assert msg["To"].addresses[0].display_name == "Jörg Müller"
        assert msg["From"].addresses[0].display_name == "Zoë"

    def test_idn_domain_punycode_in_to_header(self):
        to = parse_address_list(["Ämil <emil@Bücher.DE>"], "to")
        assert to[0].email == "emil@xn--bcher-kva.de"
        raw, _ = build(to=to)
        assert b"<emil@xn--bcher-kva.de>" in raw
        assert parse(raw)["To"].addresses[0].addr_spec == "emil@xn--bcher-kva.de"

    @pytest.mark.parametrize(
        "name",
        ["Smith, John", "a: b; c", 'q"uo\\te', "x" * 60 + ", " + "y" * 60 + ";z:", "Ü, " + "x" * 100,
         "<evil@example.net>", "Support, evil@example.net:" + " pad" * 30],
    )
    def test_display_name_specials_never_add_recipients(self, name):
        to = [Address("a@example.org", name), Address("b@example.org", "B")]
        cc = [Address("c@example.org", name)]
        raw, _ = build(to=to, cc=cc, reply_to=[Address("r@example.org", name)])
        msg = parse(raw)
        assert [a.addr_spec for a in msg["To"].addresses] == ["a@example.org", "b@example.org"]
        assert [a.addr_spec for a in msg["Cc"].addresses] == ["c@example.org"]
        assert [a.addr_spec for a in msg["Reply-To"].addresses] == ["r@example.org"]
        assert re.sub(r"\s+", "", msg["To"].addresses[0].display_name) == re.sub(r"\s+", "", name)
        assert_wire_safe(raw)

    def test_many_recipients_folded(self):
        to = [Address(f"user{i}@example.org", f"User Number {i}") for i in range(200)]
        raw, _ = build(to=to)
        assert all(len(line) <= 78 for line in raw_header_lines(raw) if b"user" in line)
        assert [a.addr_spec for a in parse(raw)["To"].addresses] == [a.email for a in to]

    def test_bcc_never_in_headers(self):
        raw, _ = build(cc=[Address("cc@example.org")])
        assert not any(line.lower().startswith(b"bcc") for line in raw_header_lines(raw))
        assert "Bcc" not in parse(raw)
        with pytest.raises(InvalidField):
            build(headers=[("Bcc", "hidden@example.org")])

    def test_custom_headers_written(self):
        unsubscribe = "<https://example.com/unsubscribe/" + "a" * 150 + ">, <mailto:unsub@example.com>"
        headers = validate_custom_headers(
            {"X-Campaign": "spring sale", "List-Unsubscribe": unsubscribe, "X-Unicode": "é ü",
             "References": "<a@x> <b@x>"}
        )
        raw, _ = build(headers=headers)
        msg = parse(raw)
        assert msg["X-Campaign"] == "spring sale"
        assert msg["X-Unicode"] == "é ü"
        assert msg["References"] == "<a@x> <b@x>"
        # long ASCII values are folded at spaces, never turned into encoded-words
        assert msg["List-Unsubscribe"] == unsubscribe
        assert b"List-Unsubscribe: <https://example.com/unsubscribe/" + b"a" * 150 + b">,\r\n" in raw
        assert_wire_safe(raw)

    def test_header_injection_refused_at_build_too(self):
        with pytest.raises(InvalidField) as exc:
            build(headers=[("X-Foo", "a\r\nBcc: x@y.com")])
        assert exc.value.field == "headers.X-Foo"
        with pytest.raises(InvalidField):
            build(headers=[("X-Foo\r\nBcc", "x")])
        with pytest.raises(InvalidField) as exc:
            build(headers=[("subject", "second subject")])
        assert exc.value.field == "headers.subject"

    def test_unfoldable_custom_header_refused(self):
        with pytest.raises(InvalidField) as exc:
            validate_custom_headers({"X-Token": "t" * 1000})
        assert exc.value.field == "headers.X-Token"

    def test_attachment_name_injection_refused_at_build(self):
        with pytest.raises(InvalidField) as exc:
            build(attachments=[("a.txt\r\nContent-Type: text/html", "text/plain", b"x")])
        assert exc.value.field == "attachments[0].name"

    def test_long_html_line(self):
        html = "<p>" + "x" * 5000 + "</p>"
        raw, _ = build(text_body=None, html_body=html)
        assert_wire_safe(raw)
        assert all(len(line) <= 78 for line in lines(raw))
        assert parse(raw).get_content().rstrip("\r\n") == html

    def test_long_unicode_html_line(self):
        html = "<p>" + "日本語" * 3000 + "</p>"
        raw, _ = build(text_body="t" * 5000, html_body=html)
        assert_wire_safe(raw)
        parts = list(parse(raw).iter_parts())
        assert parts[1].get_content().rstrip("\r\n") == html
        assert parts[0].get_content().rstrip("\r\n") == "t" * 5000

    @pytest.mark.parametrize(
        "body",
        [
            "line1\n.\nline2",
            "line1\r.\rline2",
            "line1\n.\r\nline2",
            "line1\r\n.\r\nMAIL FROM:<x@y>\r\n",
            "a\rb\nc\r\nd\n\r",
            "x" * 76 + ".",  # quoted-printable soft break would leave a lone dot
            ".",
            "\n.\n" * 10,
        ],
    )
    def test_smuggling_sequences_do_not_survive(self, body):
        for kwargs in ({"text_body": body}, {"text_body": None, "html_body": body},
                       {"text_body": body, "html_body": body + "é" * 5},
                       {"text_body": body, "attachments": [("a", "text/plain", body.encode())]}):
            raw, _ = build(**kwargs)
            assert_wire_safe(raw)
            msg = parse(raw)
            first = next(p for p in msg.walk() if p.get_content_maintype() == "text")
            expected = re.sub(r"\r\n|\r|\n", "\n", body)
            assert re.sub(r"\r\n|\r|\n", "\n", first.get_content()).rstrip("\n") == expected.rstrip("\n")

    def test_control_characters_in_body_are_encoded(self):
        raw, _ = build(text_body="a\x00b\x0bc\x1bd")
        assert_wire_safe(raw)
        assert b"\x00" not in raw
        assert parse(raw).get_content().rstrip("\r\n") == "a\x00b\x0bc\x1bd"

    def test_message_id_and_date(self):
        when = datetime(2024, 2, 29, 13, 45, 7, tzinfo=timezone(timedelta(hours=2)))
        raw, mid = build(date=when)
        assert not mid.startswith("<") and mid.endswith("@mail.example.com")
        msg = parse(raw)
        assert msg["Message-ID"] == f"<{mid}>"
        assert msg["Date"] == "Thu, 29 Feb 2024 13:45:07 +0200"
        assert msg["Date"].datetime == when

    def test_message_ids_are_random(self):
        assert build()[1] != build()[1]

    def test_given_message_id(self):
        raw, mid = build(message_id="<abc.def@example.com>")
        assert mid == "abc.def@example.com"
        assert parse(raw)["Message-ID"] == "<abc.def@example.com>"
        with pytest.raises(InvalidField) as exc:
            build(message_id="abc\r\n@x")
        assert exc.value.field == "message_id"

    def test_idn_message_id_domain(self):
        _, mid = build(message_id_domain="bücher.de")
        assert mid.endswith("@xn--bcher-kva.de")

    def test_naive_date_is_utc(self):
        raw, _ = build(date=datetime(2024, 1, 2, 3, 4, 5))
        assert parse(raw)["Date"] == "Tue, 02 Jan 2024 03:04:05 +0000"

    def test_crlf_only_and_headers_ascii(self):
        raw, _ = build(
            subject="Sübject",
            to=[Address("a@example.org", "Ä")],
            cc=[Address("c@example.org")],
            reply_to=[Address("r@example.org", "R")],
            text_body="a\nb\rc",
            html_body="<p>é</p>\n" * 3,
            headers=[("X-Tag", "v")],
            attachments=[("ü.bin", "application/octet-stream", b"\r\n\n\r.\n")],
        )
        assert_wire_safe(raw)
        assert message_size(raw) == len(raw)

    def test_hand_made_bad_inputs(self):
        with pytest.raises(InvalidField) as exc:
            build(from_="sender@example.com")
        assert exc.value.field == "from"
        with pytest.raises(InvalidField) as exc:
            build(to=["a@example.org"])
        assert exc.value.field == "to"
        with pytest.raises(InvalidField) as exc:
            build(attachments=[("a", "text/plain", "not bytes")])
        assert exc.value.field == "attachments[0]"
        with pytest.raises(InvalidField) as exc:
            build(attachments=[("a", "multipart/mixed", b"x")])
        assert exc.value.field == "attachments[0].content_type"


class TestCheckWireFormat:
    def test_accepts_crlf_ascii(self):
        check_wire_format(b"A: b\r\n\r\nbody\r\n")

    @pytest.mark.parametrize(
        "raw",
        [
            b"A: b\nc\r\n",  # bare LF
            b"A: b\r\r\n",  # bare CR
            b"A: \xc3\xa9\r\n",  # 8-bit
            b"A: \x00\r\n",  # NUL
            b"A: " + b"x" * 999 + b"\r\n",  # line over 998 octets
            b"A: b\r\n\r\n.\r\nx\r\n",  # end-of-data line
            b"A: b",  # no final CRLF
        ],
    )
    def test_rejects(self, raw):
        with pytest.raises(MessageBuildError):
            check_wire_format(raw)


# --------------------------------------------------------------------------------------------
# Parsing helpers


class TestHeaderAddresses:
    def test_round_trip_with_built_message(self):
        raw, _ = build(from_=Address("news@xn--bcher-kva.de", "Bücher, Team"), subject="Grüße")
        result = header_addresses(raw)
        assert result["from"] == Address("news@xn--bcher-kva.de", "Bücher, Team")
        assert result["from"].domain == "xn--bcher-kva.de"
        assert result["subject"] == "Grüße"
        assert result["sender"] is None

    def test_simple(self):
        result = header_addresses(b"From: Alice <alice@Example.COM>\r\nSender: s@other.example\r\n\r\nbody")
        assert result == {
            "from": Address("alice@example.com", "Alice"),
            "sender": Address("s@other.example"),
            "resent": [],
            "subject": None,
            "message_id": None,
        }

    @pytest.mark.parametrize("header", [b"Message-ID: <a.b@x.example>",
                                        b"Message-ID:\r\n <a.b@x.example>",
                                        b"Message-ID: <a.b@\r\n x.example> (added by x)",
                                        b"Message-Id: a.b@x.example"])
    def test_message_id_unfolded_without_brackets(self, header):
        raw = b"From: a@good.example\r\n" + header + b"\r\n\r\nbody"
        assert header_addresses(raw)["message_id"] == "a.b@x.example"

    def test_resent_originators_every_block(self):
        result = header_addresses(b"Resent-From: r1@one.example\r\nResent-Sender: <s1@two.example>\r\n"
                                  b"Resent-From: R <r2@three.example>\r\nFrom: a@good.example\r\n\r\n")
        assert result["resent"] == [("resent-from", Address("r1@one.example")),
                                    ("resent-from", Address("r2@three.example", "R")),
                                    ("resent-sender", Address("s1@two.example"))]

    @pytest.mark.parametrize("header", [b"Resent-From: a@x.example, b@y.example",
                                        b"Resent-Sender: not an address",
                                        b'Resent-From: "a@good.example" <b@evil.example'])
    def test_resent_originators_must_be_one_clear_mailbox(self, header):
        with pytest.raises(InvalidField) as info:
            header_addresses(header + b"\r\nFrom: a@good.example\r\n\r\n")
        assert info.value.field.startswith("resent-")

    def test_quoted_address_in_name_is_not_the_address(self):
        assert header_addresses(b'From: "a@good.example" <b@evil.example>\r\n\r\n')["from"].domain == "evil.example"

    @pytest.mark.parametrize(
        "raw",
        [
            b"Subject: no from\r\n\r\n",
            b"From: a@good.example\r\nFrom: b@evil.example\r\n\r\n",
            b"From: <b@evil.example>, <a@good.example>\r\n\r\n",
            b"From: a@good.example <b@evil.example>\r\n\r\n",
            b"From: <b@evil.example>a@good.example\r\n\r\n",
            b"From: group: a@good.example;\r\n\r\n",
            b"From: @evil.example:a@good.example\r\n\r\n",
            b"From: a@good.example (comment)\r\n\r\n",
            b"From: not an address\r\n\r\n",
        ],
    )
    def test_ambiguous_or_missing_from_refused(self, raw):
        with pytest.raises(InvalidField) as exc:
            header_addresses(raw)
        assert exc.value.field == "from"

    def test_two_subjects_refused(self):
        with pytest.raises(InvalidField) as exc:
            header_addresses(b"From: a@good.example\r\nSubject: a\r\nSubject: b\r\n\r\n")
        assert exc.value.field == "subject"


# --------------------------------------------------------------------------------------------
# The fast single-part builder and the cheap self-check (bytes operations) must agree with
# the email package's builder and the full parse-back.

FIXED = dict(date=datetime(2026, 3, 1, 8, 5, 9, tzinfo=timezone(timedelta(hours=2))),
             message_id="fixed.1234@mail.example.com")
SINGLE_PART_CASES = [
    dict(),
    dict(text_body="Hello\nworld\r\n.\r\nend\r.\rx\n.\n"),
    dict(text_body=None, html_body="<p>" + "long line " * 200 + "</p>"),
    dict(text_body="Grüße, ☃ and a\x0bvertical tab\nline two"),
    dict(text_body=None, html_body="<p>Jörg ☃</p>\n" * 50),
    dict(text_body=".\n..\n.", subject="Dots"),
    dict(subject="Ünïcödé " * 20, to=[Address("a@example.org", "Jörg Müller")]),
    dict(subject=None, cc=[Address("c@example.org", "Smith, John")],
         reply_to=[Address("r@example.org", 'q"uo\\te')]),
    dict(to=[Address(f"user{i}@example.org", f"User {i}") for i in range(40)]),
    dict(headers=[("X-Campaign", "spring =?utf-8?q?x?= sale"), ("X-Ünicode", "v")][:1]
         + [("X-Long", "word " * 100), ("X-Unicode-Value", "héllo")]),
    dict(from_=Address("noreply@example.com", "=?utf-8?q?fake?=")),
    dict(text_body="x" * 5000),
]


@pytest.mark.parametrize("case", range(len(SINGLE_PART_CASES)))
def test_fast_single_part_is_byte_identical(case, monkeypatch):
    overrides = {**FIXED, **SINGLE_PART_CASES[case]}
    fast, _ = build(**overrides)
    monkeypatch.setattr("chalicelib.services.mime.build._FAST_SINGLE_PART", False)
    slow, _ = build(**overrides)
    assert fast == slow
    assert_wire_safe(fast)


def _verify_args(**overrides):
    args = dict(from_=FROM, to=[Address("rcpt@example.org")], cc=[], reply_to=[],
                subject="Hello", header_names=[], message_id=FIXED["message_id"])
    args.update(overrides)
    return args


def test_cheap_verify_accepts_what_the_parse_back_accepts():
    from chalicelib.services.mime import verify_built, verify_built_cheap

    to = [Address(f"u{i}@example.org", f"Ü User {i}") for i in range(30)]
    raw, _ = build(to=to, headers=[("X-A", "b")], **FIXED)
    args = _verify_args(to=to, header_names=["X-A"])
    assert verify_built_cheap(raw, **args) is True
    verify_built(raw, **args)


@pytest.mark.parametrize("tamper", [
    lambda raw: raw.replace(b"To: rcpt@example.org", b"To: rcpt@example.org, x@evil.test"),
    lambda raw: raw.replace(b"Subject: Hello\r\n", b"Subject: Hello\r\nBcc: x@evil.test\r\n"),
    lambda raw: raw.replace(b"Subject: Hello\r\n", b""),
    lambda raw: raw.replace(b"From: Sender <", b"From: Sender <x"),
    lambda raw: raw.replace(b"Message-ID: <fixed", b"Message-ID: <other"),
])
def test_cheap_verify_refuses_tampered_output(tamper):
    from chalicelib.services.mime import verify_built, verify_built_cheap

    raw, _ = build(**FIXED)
    bad = tamper(raw)
    assert bad != raw
    for check in (verify_built_cheap, verify_built):
        with pytest.raises(MessageBuildError):
            check(bad, **_verify_args())


def test_cheap_verify_defers_quoted_names_and_odd_lines_to_the_parser():
    from chalicelib.services.mime import verify_built_cheap

    to = [Address("a@example.org", "Smith, John")]
    raw, _ = build(to=to, **FIXED)
    assert verify_built_cheap(raw, **_verify_args(to=to)) is False
    raw, _ = build(**FIXED)
    odd = raw.replace(b"Subject: Hello\r\n", b"Subject: Hello\r\nnot a header line\r\n")
    assert verify_built_cheap(odd, **_verify_args()) is False


def test_line_ending_fast_path_matches_the_full_rewrite():
    import random
    import re

    from chalicelib.services.mime import normalize_line_endings

    rnd = random.Random(7)
    for _ in range(5000):
        data = bytes(rnd.choice(b"ab\r\n.") for _ in range(rnd.randint(0, 16)))
        assert normalize_line_endings(data) == re.sub(rb"\r\n|\r|\n", b"\r\n", data), data


def test_remembered_originators_and_addresses_never_hide_an_error():
    from chalicelib.services import mime as m

    good = b"From: App <app@example.com>\r\nSubject: x\r\n\r\n"
    assert m.header_addresses(good)["from"] == m.header_addresses(good)["from"]
    with pytest.raises(m.InvalidField):
        m.header_addresses(b"From: App <app@example.com>, b@example.com\r\n\r\n")
    with pytest.raises(m.InvalidField):
        m.header_addresses(b"From: App <app@example.com>\r\nFrom: App <app@example.com>\r\n\r\n")
    assert m.parse_address("a@example.com", "to") is m.parse_address("a@example.com", "to")
    for _ in range(2):
        with pytest.raises(m.InvalidField):
            m.parse_address("not an address", "to")


def test_header_classes_are_made_once_per_name_and_parse_as_the_stock_policy():
    """checks.PARSE_POLICY: the stock registry makes a class per parsed header; ours keeps
    one per name (bounded) and reads every header exactly as email.policy.default does."""
    from email import policy
    from email.parser import BytesParser, Parser

    from chalicelib.services.mime import checks

    registry = checks.PARSE_POLICY.header_factory
    assert registry["From"] is registry["from"] is registry["FROM"]
    raw = (b"From: =?utf-8?q?J=C3=B6rg?= <j@example.com>\r\nTo: a@b.example, \"C, D\" "
           b"<c@d.example>\r\nSubject: hi\r\nX-Odd: (comment) value\r\nContent-Type: "
           b"text/plain; charset=utf-8\r\n\r\nbody\r\n")
    ours = BytesParser(policy=checks.PARSE_POLICY).parsebytes(raw, headersonly=True)
    stock = BytesParser(policy=policy.default).parsebytes(raw, headersonly=True)
    for name in ("From", "To", "Subject", "X-Odd", "Content-Type"):
        assert str(ours[name]) == str(stock[name])
        assert type(ours[name]).__mro__[1:] == type(stock[name]).__mro__[1:]
    assert ours["To"].addresses == stock["To"].addresses
    # HeaderBlock: the same header objects and raw values as the stock parse, folded,
    # encoded, repeated and 8-bit headers included.
    tricky = (b"From: =?utf-8?b?SsO2cmc=?=\r\n <j@example.com>\r\nSender: a@b.example\r\n"
              b"Sender: c@d.example\r\nSubject: caf\xc3\xa9 \r\n\tfolded\r\nMessage-ID: "
              b"<x@y>\r\nResent-From: r@s.example\r\nContent-Type: multipart/mixed\r\n\r\n")
    block = checks.HeaderBlock(tricky)
    # UTF-8 header fields (RFC 6532) are read as text, where the stock bytes parser would
    # leave surrogate escapes; 8-bit that is not UTF-8 is read as that parser reads it.
    stock = Parser(policy=policy.default).parsestr(tricky.decode(), headersonly=True)
    assert list(block.raw_items()) == list(stock.raw_items())
    assert str(block.get("Subject")) == "café \tfolded"
    latin1 = tricky.replace(b"caf\xc3\xa9", b"caf\xe9")
    assert list(checks.HeaderBlock(latin1).raw_items()) == list(BytesParser(
        policy=policy.default).parsebytes(latin1, headersonly=True).raw_items())
    for name in ("From", "Sender", "Subject", "Message-ID", "Resent-From", "X-None"):
        ours_all, stock_all = block.get_all(name), stock.get_all(name)
        assert (ours_all is None) == (stock_all is None)
        assert [str(v) for v in ours_all or []] == [str(v) for v in stock_all or []]
        assert str(block.get(name)) == str(stock[name])
        assert [[type(d) for d in v.defects] for v in ours_all or []] == \
            [[type(d) for d in v.defects] for v in stock_all or []]
    many = checks._HeaderClasses()
    for index in range(many.LIMIT + 10):
        many[f"X-{index}"]
    assert len(many._made) == many.LIMIT
