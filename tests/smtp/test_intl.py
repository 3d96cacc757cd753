"""Internationalized mail (RFC 6530-6533), the accepting side: UTF-8 addresses and headers
over SMTP when the client declares SMTPUTF8 and over HTTP; refused at the right command
otherwise; stored so that delivery can tell the message needs SMTPUTF8; suppressions with
such addresses."""
from __future__ import annotations

import base64
from email import message_from_string, policy
from email.message import EmailMessage

import pytest

from chalicelib.services import mime
from tests.support.smtp import (RawSession, b64, make_route, refused_submission,
                                starttls_client)
from tests.support.smtp import inbound, stored_raw
from tests.support import Api, unique, wait_for

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")

SERVER = "/api/v2/server"


def messages(api, tenant, query: str) -> list[dict]:
    return Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                            params={"query": query}))["messages"]


def utf8_parse(raw: bytes):
    """The standard library's reading of an RFC 6532 message (its bytes parser would leave
    the UTF-8 header bytes as surrogate escapes)."""
    return message_from_string(raw.decode("utf-8"), policy=policy.SMTPUTF8)


def authenticated_raw(stack, tenant) -> RawSession:
    """A raw session after STARTTLS and AUTH (for the commands smtplib will not send)."""
    from tests.support.smtp import client_context

    session = RawSession(stack.smtp_port)
    session.command("EHLO intl.test")
    session.command("STARTTLS")
    session.sock = client_context().wrap_socket(session.sock, server_hostname="localhost")
    session.command("EHLO intl.test")
    assert session.command("AUTH PLAIN " + b64(f"\0u\0{tenant.smtp_key}"))[0] == 235
    return session


def test_without_smtputf8_an_internationalized_address_is_refused_at_rcpt(stack, tenant):
    """It was 250 at RCPT and 554 after the whole DATA."""
    session = authenticated_raw(stack, tenant)
    try:
        assert session.command(f"MAIL FROM:<app@{tenant.domain}>")[0] == 250
        code, text = session.command("RCPT TO:<üser@recipient.example>")
        assert (code, text[:9]) == (553, "553 5.6.7")
        assert session.command("RSET")[0] == 250
        code, text = session.command(f"MAIL FROM:<äpp@{tenant.domain}>")
        assert (code, text[:9]) == (553, "553 5.6.7")
    finally:
        session.close()


@pytest.mark.parametrize("address", ["a" * 65 + "@recipient.example", "a b@recipient.example",
                                     "x@-bad-.example", "ü" * 33 + "@recipient.example"])
def test_invalid_or_over_long_recipients_are_refused_at_rcpt(stack, tenant, address):
    session = authenticated_raw(stack, tenant)
    try:
        session.command(f"MAIL FROM:<app@{tenant.domain}> SMTPUTF8")
        code, text = session.command(f"RCPT TO:<{address}>")
        assert code == 553 and text.startswith("553 5.1.3 ") or \
            text.startswith("553 5.1.3 Error: malformed address"), text
    finally:
        session.close()


def test_internationalized_mail_is_accepted_with_smtputf8_and_stored(stack, api, tenant):
    """A real client (Python's smtplib) declares SMTPUTF8 itself for this message; the
    gateway accepts the UTF-8 addresses and RFC 6532 headers (a UTF-8 From display name was
    refused 550 5.7.1), stores them as sent, and the stored message says it needs
    SMTPUTF8."""
    local = unique("üser")
    msg = EmailMessage()
    msg["From"] = f"Jörg Müller <app@{tenant.domain}>"
    msg["To"] = f"Émile Zoë <{local}@Bücher.example>"
    msg["Subject"] = "Grüße aus Köln"
    msg.set_content("Hallo, schöne Grüße\n")
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        assert client.send_message(msg) == {}  # smtplib adds SMTPUTF8 and BODY=8BITMIME
    [message] = wait_for(lambda: messages(api, tenant, local), message="the message")
    assert message["rcpt_to"] == f"{local}@xn--bcher-kva.example"  # the domain's A-label
    assert message["subject"] == "Grüße aus Köln"
    raw = stored_raw(message["id"])
    assert mime.needs_smtputf8(raw, message["rcpt_to"])
    head = raw.split(b"\r\n\r\n")[0].decode("utf-8")
    assert "From: Jörg Müller <app@" in head and f"<{local}@Bücher.example>" in head
    assert " with UTF8SMTPSA tls TLS_" in head
    parsed = utf8_parse(raw)
    assert parsed["From"].addresses[0].display_name == "Jörg Müller"


@pytest.mark.parametrize("header", ["Subject: Grüße", "From: Jörg <app@{domain}>",
                                    "To: üser@recipient.example"])
def test_utf8_headers_without_smtputf8_are_refused_with_a_clear_code(stack, tenant, header):
    """The one rule for header text: ASCII (RFC 2047 for other text), or UTF-8 in a message
    sent with SMTPUTF8. Raw UTF-8 in Subject and To was accepted without it and sent on."""
    header = header.format(domain=tenant.domain)
    data = f"From: app@{tenant.domain}\r\n{header}\r\n\r\nbody\r\n"
    if header.startswith("From:"):
        data = f"{header}\r\n\r\nbody\r\n"
    refused = refused_submission(stack.smtp_port, tenant, data.encode())
    assert refused.smtp_code == 554 and refused.smtp_error.startswith(b"5.6.0 headers: ")
    assert b"SMTPUTF8" in refused.smtp_error


def test_the_http_api_sends_internationalized_addresses(api, tenant):
    local = unique("émile")
    body = {"from": f"Jörg <jörg@{tenant.domain}>", "to": [f"Émile <{local}@Bücher.example>"],
            "cc": [{"email": f"zoë-{local}@recipient.example", "name": "Zoë"}],
            "bcc": [f"ünsichtbar-{local}@recipient.example"],
            "reply_to": ["Antwort <antwört@recipient.example>"],
            "subject": "Grüße", "text_body": "Hallo"}
    sent = Api.data(api.post(f"{SERVER}/messages", body, server_key=tenant.api_key), 201)
    rcpts = sorted(r["rcpt_to"] for r in sent["recipients"])
    assert rcpts == sorted([f"{local}@xn--bcher-kva.example",
                            f"zoë-{local}@recipient.example",
                            f"ünsichtbar-{local}@recipient.example"])
    first = sent["recipients"][0]
    raw = base64.b64decode(Api.data(api.get(f"{SERVER}/messages/{first['id']}/raw",
                                            server_key=tenant.api_key))["raw_base64"])
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert rest.isascii() and not head.isascii() and mime.needs_smtputf8(raw)
    parsed = utf8_parse(raw)  # a third party's reading
    assert [a.addr_spec for a in parsed["To"].addresses] == [f"{local}@xn--bcher-kva.example"]
    assert parsed["To"].addresses[0].display_name == "Émile"
    assert parsed["From"].addresses[0].addr_spec == f"jörg@{tenant.domain}"
    assert [a.addr_spec for a in parsed["Reply-To"].addresses] == ["antwört@recipient.example"]
    assert parsed["Bcc"] is None and str(parsed["Subject"]) == "Grüße"
    assert b"Subject: =?utf-8?" in head  # text fields stay RFC 2047: ASCII where it can be
    # An address with an IDN domain but an ASCII local part needs nothing: A-label, ASCII.
    plain = Api.data(api.post(f"{SERVER}/messages", {**body, "from": f"app@{tenant.domain}",
                                                     "to": ["plain@Bücher.example"],
                                                     "cc": [], "bcc": [], "reply_to": []},
                              server_key=tenant.api_key), 201)["recipients"][0]
    raw = base64.b64decode(Api.data(api.get(f"{SERVER}/messages/{plain['id']}/raw",
                                            server_key=tenant.api_key))["raw_base64"])
    assert raw.isascii() and not mime.needs_smtputf8(raw, plain["rcpt_to"])
    assert plain["rcpt_to"] == "plain@xn--bcher-kva.example"


def test_suppressions_hold_internationalized_addresses_in_any_form(stack, api, tenant):
    local = unique("sperre")
    base = tenant.server_path + "/suppressions"
    entry = Api.data(api.post(base, {"address": f"Ü{local}@Bücher.example"}), 201)
    stored = f"ü{local}@xn--bcher-kva.example"
    assert stored in str(entry)
    # The same address again, written the other way: one entry (idempotent).
    again = api.post(base, {"address": f"ü{local}@xn--bcher-kva.example"})
    assert again.status_code in (200, 201)
    listed = Api.data(api.get(base, params={"query": local}))["suppressions"]
    assert [s["address"] for s in listed] == [stored]
    sent = Api.data(api.post(f"{SERVER}/messages",
                             {"from": f"app@{tenant.domain}", "to": [f"Ü{local}@bücher.example"],
                              "subject": "held", "text_body": "x"},
                             server_key=tenant.api_key), 201)
    assert sent["recipients"][0]["status"] == "Held"
    with starttls_client(stack.smtp_port) as client:  # and over SMTP
        client.login("x", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [f"ü{local}@bücher.example"],
                        f"From: app@{tenant.domain}\r\nSubject: held smtp\r\n\r\nx\r\n".encode(),
                        mail_options=["SMTPUTF8"])
    [held] = wait_for(lambda: [m for m in messages(api, tenant, local)
                               if m["subject"] == "held smtp"], message="the SMTP message")
    assert held["status"] == "Held"
    Api.data(api.delete(f"{base}/Ü{local}@Bücher.example"))
    assert Api.data(api.get(base, params={"query": local}))["suppressions"] == []


def test_inbound_mail_to_an_internationalized_address(stack, api, tenant):
    make_route(api, tenant, "*", mode="accept")
    session = RawSession(stack.smtp_port)
    try:
        session.command("EHLO intl.test")
        session.command("MAIL FROM:<absender@sender.example>")
        code, text = session.command(f"RCPT TO:<empfänger@{tenant.domain}>")
        assert (code, text[:9]) == (553, "553 5.6.7")  # not declared
        session.command("RSET")
        assert session.command("MAIL FROM:<absénder@sender.example> SMTPUTF8")[0] == 250
        assert session.command(f"RCPT TO:<Empfänger@{tenant.domain}>")[0] == 250
        session.command("DATA")
        session.send("From: absénder@sender.example\r\nSubject: Eingang ✓\r\n\r\nhi\r\n.\r\n"
                     .encode())
        assert session.reply()[0] == 250
    finally:
        session.close()
    [message] = inbound(api, tenant, query="Eingang")
    assert message["rcpt_to"] == f"Empfänger@{tenant.domain}"
    assert message["mail_from"] == "absénder@sender.example"


def test_an_internationalized_message_keeps_its_utf8_fields_through_tracking_and_signing(
        api, tenant, monkeypatch):
    """What delivery prepares from the stored message (open/click tracking rewrites the
    HTML part, DKIM signs) keeps the RFC 6532 fields as they were stored."""
    from tests.support.sending import dns_txt, verify_dkim, wait_status

    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    local = unique("zoë")
    sent = Api.data(api.post(f"{SERVER}/messages", {
        "from": f"Jörg <jörg@{tenant.domain}>", "to": [f"Zoë <{local}@bücher.example>"],
        "subject": "Grüße", "html_body": '<p>Hallo <a href="https://example.org/x">da</a></p>'},
        server_key=tenant.api_key), 201)
    [recipient] = sent["recipients"]
    wait_status(api, tenant, recipient["id"], "Sent")
    signed = base64.b64decode(Api.data(api.get(f"{SERVER}/messages/{recipient['id']}/raw",
                                               server_key=tenant.api_key))["raw_base64"])
    head = signed.split(b"\r\n\r\n")[0].decode("utf-8")
    assert f"<{local}@xn--bcher-kva.example>" in head and f"<jörg@{tenant.domain}>" in head
    assert "/t/o/" in signed.decode("utf-8")  # tracked
    assert mime.needs_smtputf8(signed, recipient["rcpt_to"])
    assert verify_dkim(signed, dns_txt(api, tenant))
