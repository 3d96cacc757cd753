import email.policy
from email.message import EmailMessage
from email.parser import BytesParser

import pytest

from chalicelib.services.tracking.rewrite import (
    PIXEL_TEMPLATE,
    apply_tracking,
    rewrite_html,
)

BASE = "https://mail.example.net/t"
PIXEL = f"{BASE}/o/tok123"


class Recorder:
    """link_url callback that records what it was given."""

    def __init__(self, result=None):
        self.seen = []
        self.result = result

    def __call__(self, url):
        self.seen.append(url)
        if self.result is not None:
            return self.result
        return f"{BASE}/c/{len(self.seen)}"


def rewrite(html, pixel_url=None, result=None):
    rec = Recorder(result)
    return rewrite_html(html, link_url=rec, pixel_url=pixel_url), rec.seen


def pixel(url=PIXEL):
    return PIXEL_TEMPLATE.format(src=url)


# --------------------------------------------------------------------------- links


def test_links_rewritten_and_callback_gets_decoded_url():
    html = '<p>Hi <a href="https://shop.example.com/p?a=1&amp;b=2">buy</a> and <A HREF=\'http://x.example/\'>x</A></p>'
    out, seen = rewrite(html)
    assert seen == ["https://shop.example.com/p?a=1&b=2", "http://x.example/"]
    assert out == (
        f'<p>Hi <a href="{BASE}/c/1">buy</a> and <A HREF=\'{BASE}/c/2\'>x</A></p>'
    )


def test_unquoted_value_and_area_tag():
    html = '<a href=https://a.example/x class=btn>a</a><map><area shape=rect href="https://b.example/"></map>'
    out, seen = rewrite(html)
    assert seen == ["https://a.example/x", "https://b.example/"]
    assert out == (
        f'<a href="{BASE}/c/1" class=btn>a</a><map><area shape=rect href="{BASE}/c/2"></map>'
    )


def test_entity_decoding_follows_attribute_rules():
    html = (
        '<a href="https://e.example/?q=1&copy=2&amp;x=&#51;&lt&quot;">z</a>'
        '<a href="  https://e.example/a\n/b  ">y</a>'
    )
    _, seen = rewrite(html)
    # "&copy=" is not a reference inside an attribute; "&lt" without ";" is.
    assert seen == ['https://e.example/?q=1&copy=2&x=3<"', "https://e.example/a/b"]


def test_new_url_is_attribute_escaped():
    html = '<a href="https://e.example/">x</a><a href=\'https://e.example/\'>y</a><a href=https://e.example/>z</a>'
    out, _ = rewrite(html, result='https://t.example/c?a=1&b="2"\'<x>')
    esc = "https://t.example/c?a=1&amp;b=&quot;2&quot;&#x27;&lt;x&gt;"
    assert out == f'<a href="{esc}">x</a><a href=\'{esc}\'>y</a><a href="{esc}">z</a>'


def test_callback_returning_none_leaves_link():
    html = '<a href="https://e.example/?a=1&amp;b=2">x</a>'
    rec = Recorder()
    out = rewrite_html(html, link_url=lambda u: rec.seen.append(u), pixel_url=None)
    assert out == html
    assert rec.seen == ["https://e.example/?a=1&b=2"]


def test_callback_bad_return_type():
    with pytest.raises(TypeError):
        rewrite_html('<a href="https://e.example/">x</a>', link_url=lambda u: 42, pixel_url=None)


@pytest.mark.parametrize(
    "tag",
    [
        '<a href="mailto:bob@example.com?subject=hi">m</a>',
        '<a href="MAILTO:bob@example.com">m</a>',
        '<a href="tel:+15551234">t</a>',
        '<a href="sms:+15551234">s</a>',
        '<a href="#top">anchor</a>',
        '<a href="/relative/path">rel</a>',
        '<a href="page.html">rel</a>',
        '<a href="//cdn.example.com/x">scheme-relative</a>',
        '<a href="">empty</a>',
        "<a href>novalue</a>",
        "<a name=x>noattr</a>",
        '<a href="javascript:alert(1)">js</a>',
        '<a href="ftp://files.example.com/">ftp</a>',
        '<a href="https://">nohost</a>',
        '<a href="https://e.example/u/{{ user_id }}">tpl</a>',
        '<a href="{{unsubscribe_url}}">tpl</a>',
        '<a href="https://e.example/%7B%7Bid%7D%7D">tpl</a>',
        '<a href="https://e.example/?e=*|EMAIL|*">merge</a>',
        '<a href="https://e.example/" data-track="false">skip</a>',
        '<a href="https://e.example/" DATA-TRACK=False>skip</a>',
        '<a href="https://e.example/" data-no-track>skip</a>',
        '<a data-no-track="" href="https://e.example/">skip</a>',
        '<a href="https://e.example/" class="btn no-track big">skip</a>',
        '<a href="https://e.example/" class=no-track>skip</a>',
    ],
)
def test_untracked_links_untouched(tag):
    html = f"<div>{tag}</div>"
    out, seen = rewrite(html)
    assert out == html
    assert seen == []


def test_data_track_true_and_other_classes_are_tracked():
    html = '<a href="https://e.example/" data-track="true" class="no-tracking">x</a>'
    out, seen = rewrite(html)
    assert seen == ["https://e.example/"]
    assert out == f'<a href="{BASE}/c/1" data-track="true" class="no-tracking">x</a>'


def test_only_first_href_counts():
    html = '<a href="https://one.example/" href="https://two.example/">x</a>'
    out, seen = rewrite(html)
    assert seen == ["https://one.example/"]
    assert out == f'<a href="{BASE}/c/1" href="https://two.example/">x</a>'


def test_other_attributes_named_like_href_untouched():
    html = '<a data-href="https://d.example/" title="href=https://t.example/" href="https://e.example/">x</a><link href="https://css.example/s.css"><img src="https://i.example/x.png">'
    out, seen = rewrite(html)
    assert seen == ["https://e.example/"]
    assert out == html.replace('href="https://e.example/"', f'href="{BASE}/c/1"')


# --------------------------------------------------------------------------- non-markup content


def test_script_style_comment_content_untouched():
    html = (
        "<html><head><style>a[href=\"https://s.example/\"]{color:red} /* <a href='https://s2.example/'> */</style>"
        "<script>var s = '<a href=\"https://js.example/\">'; if (a<b) {}</script>"
        "<SCRIPT type=x>document.write('<a href=https://js2.example/>')</SCRIPT >"
        "<title><a href=\"https://title.example/\"></title></head><body>"
        "<!-- <a href=\"https://comment.example/\">old</a> -->"
        "<!--[if mso]><a href=\"https://mso.example/\">o</a><![endif]-->"
        "<!-- a --!><a href=\"https://after-comment.example/\">real</a>"
        "<textarea><a href=\"https://ta.example/\"></textarea>"
        "<a href=\"https://real.example/\">real</a>"
        "</body></html>"
    )
    out, seen = rewrite(html, pixel_url=PIXEL)
    assert seen == ["https://after-comment.example/", "https://real.example/"]
    expected = (
        html.replace("https://after-comment.example/", f"{BASE}/c/1")
        .replace("https://real.example/", f"{BASE}/c/2")
        .replace("</body></html>", pixel() + "</body></html>")
    )
    assert out == expected


def test_comment_edge_forms():
    html = '<!--><a href="https://a.example/">a</a><!---><a href="https://b.example/">b</a><!---->'
    _, seen = rewrite(html)
    assert seen == ["https://a.example/", "https://b.example/"]


def test_unterminated_comment_and_tag_not_rewritten():
    _, seen = rewrite('<a href="https://ok.example/">x</a><!-- <a href="https://c.example/">')
    assert seen == ["https://ok.example/"]
    html = '<p>x</p><a href="https://e.example/" '
    out, seen = rewrite(html)
    assert out == html and seen == []
    html = '<a href="https://e.example/>x</a>'  # quote never closed
    out, seen = rewrite(html)
    assert out == html and seen == []


def test_malformed_html_is_robust():
    html = (
        "<<a href=https://a.example/>>< a href='https://no.example/'>"
        '<a href = "https://b.example/" / >'
        "<a/href=https://c.example/>"
        "<a\nhref\n=\n'https://d.example/'\n>"
        "</a foo='>' ><a href=\"https://e.example/\">"
        "<p <a href='https://no2.example/'>"
        "<?php echo '<a href=\"https://pi.example/\">'; ?>"
        "<!DOCTYPE x><![CDATA[<a href=\"https://cdata.example/\">]]>"
        "</ a><a href=\"https://f.example/\">"
    )
    out, seen = rewrite(html)
    assert seen == [
        "https://a.example/",
        "https://b.example/",
        "https://c.example/",
        "https://d.example/",
        "https://e.example/",
        "https://f.example/",
    ]
    # Only the href values changed.
    for url in seen:
        assert url not in out
    assert "https://no.example/" in out and "https://no2.example/" in out


def test_everything_else_preserved_byte_for_byte():
    html = (
        "<!DOCTYPE html>\r\n<HTML lang=en>\r\n<body  STYLE='x'>\n"
        "  <A  class = \"b\"   HREF = \"https://e.example/?x=1&amp;y=2\"  target=_blank >Go &amp; see</A>\n"
        "  <p>caf\u00e9 &nbsp; \u2603 <b>bold</b><br/></p>\n"
        "</BODY >\n</HTML>\n"
    )
    out, _ = rewrite(html, pixel_url=PIXEL)
    assert out == html.replace(
        '"https://e.example/?x=1&amp;y=2"', f'"{BASE}/c/1"'
    ).replace("</BODY >", pixel() + "</BODY >")


# --------------------------------------------------------------------------- pixel


def test_pixel_before_body_close_case_insensitive():
    html = "<html><body><p>x</p></BoDy></html>"
    out, _ = rewrite(html, pixel_url=PIXEL)
    assert out == f"<html><body><p>x</p>{pixel()}</BoDy></html>"


def test_pixel_appended_without_body():
    out, _ = rewrite("<p>hello</p>", pixel_url=PIXEL)
    assert out == "<p>hello</p>" + pixel()


def test_pixel_ignores_body_in_comment_and_script():
    html = "<p>x</p><!-- </body> --><script>'</body>'</script>"
    out, _ = rewrite(html, pixel_url=PIXEL)
    assert out == html + pixel()


def test_pixel_url_escaped_and_none_means_no_pixel():
    out, _ = rewrite("<body></body>", pixel_url='https://t.example/o?a=1&b="2"')
    assert '<img src="https://t.example/o?a=1&amp;b=&quot;2&quot;" width="1" height="1"' in out
    assert rewrite("<body></body>", pixel_url=None)[0] == "<body></body>"


def test_pixel_markup():
    assert pixel("P") == (
        '<img src="P" width="1" height="1" alt="" '
        'style="display:none;border:0;width:1px;height:1px" />'
    )


def test_unicode_preserved():
    html = "<body><p>Grüße — 日本語 😀</p><a href=\"https://例え.jp/パス?q=ü\">リンク</a></body>"
    out, seen = rewrite(html, pixel_url=PIXEL)
    assert seen == ["https://例え.jp/パス?q=ü"]
    assert out == f"<body><p>Grüße — 日本語 😀</p><a href=\"{BASE}/c/1\">リンク</a>{pixel()}</body>"


# --------------------------------------------------------------------------- MIME


HTML_BODY = (
    "<html><body><p>Hello Zoë, ünïcödé ✓</p>"
    '<a href="https://shop.example.com/p?a=1&amp;b=2">Shop</a> '
    '<a href="mailto:help@example.com">help</a>'
    "</body></html>\n"
)
TEXT_BODY = "Hello Zoë,\nvisit https://shop.example.com/p?a=1&b=2\n-- \nsig\n"


def make_alternative(html=HTML_BODY, text=TEXT_BODY, html_cte="quoted-printable"):
    msg = EmailMessage()
    msg["From"] = "Sender <sender@example.com>"
    msg["To"] = "Zoë <zoe@example.org>"
    msg["Subject"] = "Your order — with a rather long subject line that will need folding when written"
    msg["Message-ID"] = "<abc@example.com>"
    msg["X-Custom"] = "keep me"
    msg.set_content(text, cte="quoted-printable")
    msg.add_alternative(html, subtype="html", cte=html_cte)
    return msg.as_bytes(policy=email.policy.SMTP)


def parse(raw):
    return BytesParser(policy=email.policy.default).parsebytes(raw)


def raw_part_bytes(raw, content_type):
    """The bytes of a (leaf) part as they appear in the serialized message."""
    msg = parse(raw)
    for part in msg.walk():
        if part.get_content_type() == content_type and not part.is_multipart():
            return part.as_bytes(policy=email.policy.SMTP)
    raise AssertionError(content_type)


def content(part):
    """Decoded content with line endings normalized (QP keeps the wire's CRLF)."""
    return part.get_content().replace("\r\n", "\n")


def header_block(raw):
    return raw.split(b"\r\n\r\n", 1)[0]


def check_wire_format(raw):
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert b"\r" not in raw.replace(b"\r\n", b"")
    assert all(len(line) <= 998 for line in raw.split(b"\r\n"))


def test_multipart_alternative_html_rewritten_text_identical():
    raw = make_alternative()
    rec = Recorder()
    out = apply_tracking(raw, link_url=rec, pixel_url=PIXEL)
    assert rec.seen == ["https://shop.example.com/p?a=1&b=2"]
    check_wire_format(out)

    msg = parse(out)
    html_part = msg.get_body(("html",))
    text_part = msg.get_body(("plain",))
    assert content(html_part) == HTML_BODY.replace(
        "https://shop.example.com/p?a=1&amp;b=2", f"{BASE}/c/1"
    ).replace("</body>", pixel() + "</body>")
    assert html_part.get_content_charset() == "utf-8"
    assert html_part["Content-Transfer-Encoding"] in ("quoted-printable", "base64")
    # text part: same content and same encoded bytes
    assert content(text_part) == TEXT_BODY
    assert raw_part_bytes(out, "text/plain") == raw_part_bytes(raw, "text/plain")
    boundary = parse(raw).get_boundary().encode()
    text_section = raw.split(b"--" + boundary)[1]
    assert b"text/plain" in text_section
    assert text_section in out
    # top-level headers written back exactly
    assert header_block(out) == header_block(raw)
    assert msg.get_boundary() == parse(raw).get_boundary()


def test_text_plain_8bit_bytes_untouched():
    msg = EmailMessage()
    msg["Subject"] = "x"
    msg.set_content("Ünïcödé plain text, 8bit\n", cte="8bit")
    msg.add_alternative('<a href="https://e.example/">x</a>', subtype="html")
    raw = msg.as_bytes(policy=email.policy.SMTP)
    out = apply_tracking(raw, link_url=Recorder(), pixel_url=None)
    assert "Ünïcödé plain text, 8bit\r\n".encode() in out
    assert raw_part_bytes(out, "text/plain") == raw_part_bytes(raw, "text/plain")
    assert f'href="{BASE}/c/1"' in parse(out).get_body(("html",)).get_content()


def test_attachment_html_not_rewritten():
    msg = EmailMessage()
    msg["Subject"] = "report"
    msg.set_content("see attached")
    msg.add_alternative('<body><a href="https://body.example/">x</a></body>', subtype="html")
    msg.add_attachment(
        '<html><body><a href="https://attached.example/">r</a></body></html>',
        subtype="html",
        filename="report.html",
    )
    raw = msg.as_bytes(policy=email.policy.SMTP)
    rec = Recorder()
    out = apply_tracking(raw, link_url=rec, pixel_url=PIXEL)
    assert rec.seen == ["https://body.example/"]
    parsed = parse(out)
    (att,) = list(parsed.iter_attachments())
    assert content(att) == '<html><body><a href="https://attached.example/">r</a></body></html>\n'
    assert PIXEL not in content(att)
    orig_att = next(parse(raw).iter_attachments())
    assert att.as_bytes(policy=email.policy.SMTP) == orig_att.as_bytes(policy=email.policy.SMTP)
    check_wire_format(out)


def test_embedded_message_not_rewritten():
    inner = EmailMessage()
    inner["Subject"] = "fwd"
    inner.set_content('<a href="https://inner.example/">x</a>', subtype="html")
    outer = EmailMessage()
    outer["Subject"] = "outer"
    outer.set_content('<a href="https://outer.example/">x</a>', subtype="html")
    outer.add_attachment(inner)
    # make the embedded message inline to check we still do not enter it
    for part in outer.iter_parts():
        if part.get_content_type() == "message/rfc822":
            part.replace_header("Content-Disposition", "inline")
    rec = Recorder()
    apply_tracking(outer.as_bytes(policy=email.policy.SMTP), link_url=rec, pixel_url=None)
    assert rec.seen == ["https://outer.example/"]


def test_long_html_lines_crlf_and_998_limit():
    long_line = "<p>" + ("word " * 1000) + "</p>"
    html = f'<html><body>{long_line}<a href="https://e.example/{"x" * 1500}">x</a></body></html>'
    msg = EmailMessage()
    msg["Subject"] = "long"
    msg.set_content("plain\n")
    msg.add_alternative(html, subtype="html", cte="8bit")  # deliberately bad input
    raw = msg.as_bytes(policy=email.policy.SMTP).replace(b"\r\n", b"\n")  # LF input
    assert any(len(line) > 998 for line in raw.split(b"\n"))
    out = apply_tracking(raw, link_url=lambda u: u + "?tracked=" + "y" * 1200, pixel_url=PIXEL)
    check_wire_format(out)
    html_part = parse(out).get_body(("html",))
    assert html_part["Content-Transfer-Encoding"] in ("quoted-printable", "base64")
    text = content(html_part)
    assert long_line in text
    assert "?tracked=" in text and PIXEL in text


def test_single_part_html_message_headers_kept_in_place():
    raw = (
        b"From: a@example.com\r\n"
        b"To: b@example.com\r\n"
        b"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n"
        b"MIME-Version: 1.0\r\n"
        b"Content-Type: text/html; charset=\"utf-8\"\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n"
        b"X-Very-Long: " + b"a" * 60 + b" " + b"b" * 60 + b"\r\n"
        b"\r\n"
        + '<p>Grüße</p><a href="https://e.example/">x</a>\r\n'.encode()
    )
    out = apply_tracking(raw, link_url=Recorder(), pixel_url=None)
    check_wire_format(out)
    head = out.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    orig_head = raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    # same headers, same order, same folding; only the CTE value changed
    assert len(head) == len(orig_head)
    for new_line, old_line in zip(head, orig_head):
        if old_line.startswith(b"Content-Transfer-Encoding:"):
            assert new_line in (
                b"Content-Transfer-Encoding: quoted-printable",
                b"Content-Transfer-Encoding: base64",
            )
        else:
            assert new_line == old_line
    msg = parse(out)
    assert msg["Content-Transfer-Encoding"] in ("quoted-printable", "base64")
    assert content(msg) == f'<p>Grüße</p><a href="{BASE}/c/1">x</a>\n'


def test_latin1_part_keeps_its_charset():
    raw = (
        b"Subject: x\r\nMIME-Version: 1.0\r\n"
        b"Content-Type: text/html; charset=iso-8859-1\r\n"
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\n"
        b"<p>caf=E9</p><a href=3D\"https://e.example/\">x</a>\r\n"
    )
    out = apply_tracking(raw, link_url=Recorder(), pixel_url=None)
    msg = parse(out)
    assert msg.get_content_charset() == "iso-8859-1"
    assert msg["Content-Transfer-Encoding"] == "quoted-printable"
    assert content(msg) == f'<p>café</p><a href="{BASE}/c/1">x</a>\n'


def test_undecodable_html_part_left_alone():
    raw = (
        b"Subject: x\r\nContent-Type: text/html; charset=utf-8\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n\r\n"
        b"<p>\xff\xfe bad</p><a href=\"https://e.example/\">x</a>\r\n"
    )
    assert apply_tracking(raw, link_url=Recorder(), pixel_url=PIXEL) == raw


def test_no_html_part_returns_original_bytes():
    raw = b"From: a@example.com\nSubject: plain\n\nJust text https://e.example/\n"
    rec = Recorder()
    assert apply_tracking(raw, link_url=rec, pixel_url=PIXEL) is raw
    assert rec.seen == []


def test_nothing_to_change_returns_original_bytes():
    raw = make_alternative(html="<p>No links here</p>\n")
    assert apply_tracking(raw, link_url=Recorder(), pixel_url=None) is raw


def test_unicode_html_roundtrip_base64():
    html = "<body>" + "日本語のメール本文です。" * 50 + '<a href="https://e.example/">リンク</a></body>'
    raw = make_alternative(html=html, html_cte="base64")
    out = apply_tracking(raw, link_url=Recorder(), pixel_url=PIXEL)
    check_wire_format(out)
    part = parse(out).get_body(("html",))
    assert part["Content-Transfer-Encoding"] == "base64"
    assert content(part) == html.replace("https://e.example/", f"{BASE}/c/1").replace(
        "</body>", pixel() + "</body>"
    ) + "\n"
