"""What the gateway does to a submitted message before it is stored and signed: blind
copies (Bcc) removed, a Received trace field added, lines over 998 octets re-encoded."""
from __future__ import annotations

import base64
import re
from email import policy
from email.parser import BytesParser
from email.utils import parsedate_to_datetime

import pytest

from chalicelib.config import get_settings

from tests.support.smtp import refused_submission, starttls_client
from tests.support.smtp import stored_raw
from tests.support.sending import dns_txt, verify_dkim
from tests.support import Api, unique, wait_for

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")

SERVER = "/api/v2/server"


def header_block(data: bytes) -> bytes:
    return data.split(b"\r\n\r\n", 1)[0]


BCC_FIELD = re.compile(rb"(?im)^(resent-)?bcc[ \t]*:")


def has_bcc_field(data: bytes) -> bool:
    """A Bcc (or Resent-Bcc) field in the header block, whatever its case; the letters
    "bcc" elsewhere (a Message-ID's hex, say) are not one."""
    return bool(BCC_FIELD.search(header_block(data)))


def stored(api, tenant, to: str) -> tuple[dict, bytes]:
    found = wait_for(lambda: Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                                              params={"query": to}))["messages"],
                     message=f"the message to {to}")
    raw = Api.data(api.get(f"{SERVER}/messages/{found[0]['id']}/raw", server_key=tenant.api_key))
    return found[0], base64.b64decode(raw["raw_base64"])


def blind_mail(tenant, to: str, cc: str, hidden: list[str]) -> bytes:
    # Lower case and folded, two addresses; then a second field, upper case; and a
    # Resent-Bcc: every one of them names blind recipients.
    return (f"From: App <app@{tenant.domain}>\r\nTo: {to}\r\nCc: {cc}\r\n"
            f"bcc: Hidden Person <{hidden[0]}>,\r\n\t{hidden[1]}\r\n"
            f"Subject: {unique('blind')}\r\nBCC: {hidden[2]}\r\n"
            f"Resent-Bcc: {hidden[3]}\r\nMIME-Version: 1.0\r\n\r\n"
            "The Bcc: line of the body stays.\r\n").encode()


def test_bcc_never_reaches_any_copy(stack, api, tenant, mx, monkeypatch):
    to, cc = f"{unique('to')}@recipient.example", f"{unique('cc')}@recipient.example"
    hidden = [f"{unique(f'hidden{i}')}@recipient.example" for i in range(4)]
    everyone = [to, cc, *hidden]
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        assert client.sendmail(f"app@{tenant.domain}", everyone,
                               blind_mail(tenant, to, cc, hidden)) == {}
    for address in everyone:  # the envelope keeps every recipient
        [received] = wait_for(lambda: mx.received_for(address), 20, message=f"mail to {address}")
        assert not has_bcc_field(received.data) and not any(h.encode() in received.data for h in hidden)
        assert b"the bcc: line of the body stays." in received.data.lower()
        assert verify_dkim(received.data, dns_txt(api, tenant))  # removed before signing
        message, raw = stored(api, tenant, address)
        assert not has_bcc_field(raw) and message["rcpt_to"] == address

    # The captured-mail inbox shows the same copy.
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    to = f"{unique('cap')}@recipient.example"
    hidden = [f"{unique(f'caphidden{i}')}@recipient.example" for i in range(4)]
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [to, *hidden], blind_mail(tenant, to, to, hidden))
    message, _ = stored(api, tenant, to)
    entry = wait_for(lambda: [c for c in Api.data(api.get(
        f"{SERVER}/captured", server_key=tenant.api_key))["captured"]
        if c["message_id"] == message["id"]], message="the captured copy")[0]
    raw = Api.data(api.get(f"{SERVER}/captured/{entry['id']}/raw", server_key=tenant.api_key))
    assert not has_bcc_field(base64.b64decode(raw["raw_base64"]))
    assert not any(h in raw["raw"] for h in hidden)


RECEIVED = re.compile(
    r"Received: from (?P<helo>[^\s(]+)(?P<client> \(\[[^\]]+\]\))?\r\n\tby (?P<by>\S+) with "
    r"(?P<protocol>[A-Z0-9]+)(?: tls (?P<tls>TLS_[A-Z0-9_]+))?;\r\n\t(?P<date>[^\r\n]+)\r\n")


def test_a_submission_gets_a_received_field_without_the_client_address(stack, api, tenant, mx):
    to = f"{unique('trace')}@recipient.example"
    with starttls_client(stack.smtp_port) as client:  # EHLO client.test, STARTTLS, AUTH
        client.login("x", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [to],
                        f"From: App <app@{tenant.domain}>\r\nTo: {to}\r\nSubject: trace\r\n\r\n"
                        "Hello\r\n".encode())
    [received] = wait_for(lambda: mx.received_for(to), 20, message=f"mail to {to}")
    _, raw = stored(api, tenant, to)
    for data in (raw, received.data):
        head = header_block(data) + b"\r\n"
        trace = RECEIVED.search(head.decode())
        assert trace, head
        assert trace["helo"] == "client.test" and trace["client"] is None
        assert trace["by"] == get_settings().smtp_hostname
        assert trace["protocol"] == "ESMTPSA" and trace["tls"].startswith("TLS_")
        assert parsedate_to_datetime(trace["date"]).tzinfo is not None
        assert b"127.0.0.1" not in head and head.count(b"Received:") == 1
        # On top (RFC 5321 4.4), above the Date and Message-ID the gateway added.
        assert head.startswith(b"Received: ") or head.startswith(b"DKIM-Signature: ")
        assert head.index(b"Received:") < head.index(b"\r\nDate:") < head.index(b"Message-ID:")
    assert verify_dkim(received.data, dns_txt(api, tenant))
    parsed = BytesParser(policy=policy.default).parsebytes(received.data)  # a third party's
    assert len(parsed.get_all("Received")) == 1 and parsed["Subject"] == "trace"


def test_inbound_mail_keeps_the_client_address_in_its_received_field(stack, api, tenant):
    from tests.support.smtp import make_route, plain_client
    from tests.support.smtp import inbound, stored_raw

    make_route(api, tenant, "traced", mode="accept")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("a@sender.example", [f"traced@{tenant.domain}"],
                        b"From: a@sender.example\r\nSubject: traced in\r\n\r\nhi\r\n")
    [message] = inbound(api, tenant, query="traced in")
    trace = RECEIVED.match(stored_raw(message["id"]).decode())
    assert trace and trace["client"] == " ([127.0.0.1])" and trace["protocol"] == "ESMTP"


def test_a_submitted_long_line_is_re_encoded_before_signing(stack, api, tenant, mx):
    """Issue 34 item 7, submissions: a part with a line over 998 octets (HTML an application
    wrote on one line) is given quoted-printable before it is stored and signed; its content,
    the other part and the headers are unchanged. It was '500 Line too long'."""
    to = f"{unique('long')}@recipient.example"
    html = "<p>" + "Grüße, an unwrapped line of HTML " * 200 + "</p>"
    data = (f"From: App <app@{tenant.domain}>\r\nTo: {to}\r\nSubject: long line\r\n"
            "MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=BB\r\n\r\n"
            "--BB\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nshort text\r\n"
            "--BB\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Transfer-Encoding: 8bit\r\n\r\n{html}\r\n--BB--\r\n").encode()
    assert max(map(len, data.split(b"\r\n"))) > 6000
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        assert client.sendmail(f"app@{tenant.domain}", [to], data) == {}
    [received] = wait_for(lambda: mx.received_for(to), 20, message=f"mail to {to}")
    message, sent = stored(api, tenant, to)
    raw = stored_raw(message["id"])  # the stored source (GET .../raw: the bytes sent)
    for copy in (raw, sent, received.data):
        assert max(map(len, copy.split(b"\r\n"))) <= 998
        parsed = BytesParser(policy=policy.default).parsebytes(copy)
        # (the copy sent has the open-tracking pixel after it)
        assert parsed.get_body(("html",)).get_content().startswith(html)
        assert parsed.get_body(("plain",)).get_content() == "short text"
        assert parsed.get_body(("html",))["Content-Transfer-Encoding"] == "quoted-printable"
    stored_html = BytesParser(policy=policy.default).parsebytes(raw).get_body(("html",))
    assert stored_html.get_content() == html
    assert b"Subject: long line\r\nMIME-Version: 1.0\r\n" in raw
    assert verify_dkim(received.data, dns_txt(api, tenant))


def test_a_submitted_header_line_over_998_octets_is_refused_naming_the_limit(stack, tenant):
    data = (f"From: app@{tenant.domain}\r\nX-Long: {'x' * 1200}\r\nSubject: h\r\n\r\nhi\r\n")
    refused = refused_submission(stack.smtp_port, tenant, data.encode())
    assert refused.smtp_code == 554
    assert refused.smtp_error.startswith(b"5.6.0 message: a header line is 1208 octets")
    assert b"at most 998" in refused.smtp_error
