"""Submission through the gateway feeds the same pipeline as HTTP: From authorization, one
message per recipient, DKIM signing, tracking, delivery to a loopback MX; SMTP-IP credentials."""
from __future__ import annotations

import smtplib
from email.utils import formatdate

import pytest

from tests.support.smtp import starttls_client
from tests.support.sending import dns_txt, verify_dkim
from tests.support.tracking import html_and_text, tracking_urls
from tests.support import Api, unique, wait_for

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")

SERVER = "/api/v2/server"


def html_mail(sender: str, to: list[str], subject: str) -> bytes:
    return (f"From: App <{sender}>\r\nTo: {', '.join(to)}\r\nSubject: {subject}\r\n"
            f"Date: {formatdate(usegmt=True)}\r\nMessage-ID: <{unique('m')}@client.test>\r\n"
            "MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=BB\r\n\r\n"
            "--BB\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nVisit https://example.org/x\r\n"
            "--BB\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
            '<html><body><p>Visit <a href="https://example.org/x">us</a></p></body></html>\r\n'
            "--BB--\r\n").encode()


def messages(api, tenant, **params):
    return Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                            params=params))["messages"]


def test_submission_is_signed_tracked_and_delivered(stack, api, tenant, mx):
    to = [f"{unique('a')}@recipient.example", f"{unique('b')}@recipient.example"]
    subject = unique("smtp")
    with starttls_client(stack.smtp_port) as client:
        client.login("whoever", tenant.smtp_key)
        refused = client.sendmail(f"bounces@{tenant.domain}", to,
                                  html_mail(f"app@{tenant.domain}", to, subject))
        assert refused == {}
    for address in to:
        [received] = wait_for(lambda: mx.received_for(address), 20, message=f"mail to {address}")
        assert received.mail_from.endswith(f"@rp.{tenant.domain}")  # verified return path
        assert verify_dkim(received.data, dns_txt(api, tenant))
        html, _ = html_and_text(received.data)
        clicks, pixels = tracking_urls(html)
        assert clicks and pixels  # the same open/click tracking as the HTTP path
    sent = [m for m in messages(api, tenant, query=subject)]
    assert sorted(m["rcpt_to"] for m in sent) == sorted(to)
    assert {m["status"] for m in sent} == {"Sent"} or wait_for(
        lambda: {m["status"] for m in messages(api, tenant, query=subject)} == {"Sent"})


def test_from_domain_must_be_a_verified_domain_of_the_server(stack, tenant, mx):
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.sendmail(f"app@{tenant.domain}", ["r@recipient.example"],
                            html_mail("ceo@someone-else.example", ["r@recipient.example"], "Spoof"))
        assert refused.value.smtp_code == 550
        assert b"from" in refused.value.smtp_error.lower()


def test_smtp_ip_credential_submits_without_auth(stack, api, tenant, mx):
    Api.data(api.post(tenant.server_path + "/credentials",
                      {"type": "SMTP-IP", "name": "office", "ip_range": "127.0.0.2/32"}), 201)
    to = f"{unique('ip')}@recipient.example"
    # smtplib binds the client to 127.0.0.2: only that address is authorized.
    with smtplib.SMTP("127.0.0.1", stack.smtp_port, source_address=("127.0.0.2", 0),
                      timeout=30) as client:
        client.sendmail(f"app@{tenant.domain}", [to], html_mail(f"app@{tenant.domain}", [to], "IP"))
    wait_for(lambda: mx.received_for(to), 20, message="SMTP-IP mail delivered")
    with smtplib.SMTP("127.0.0.1", stack.smtp_port, timeout=30) as client:
        client.ehlo("client.test")
        assert client.mail(f"app@{tenant.domain}")[0] == 250
        code, reply = client.rcpt(to)
        assert code in (530, 550), reply


ORIGINATOR_HEADERS = ["Sender", "Resent-From", "Resent-Sender"]


def _plain_mail(from_: str, extra: str, to: str, subject: str) -> bytes:
    return (f"{extra}From: App <{from_}>\r\nTo: {to}\r\nSubject: {subject}\r\n"
            f"Date: {formatdate(usegmt=True)}\r\n\r\nHello\r\n").encode()


@pytest.mark.parametrize("header", ORIGINATOR_HEADERS)
def test_other_originator_headers_must_be_verified_domains_too(stack, api, tenant, mx, header):
    """A verified From does not carry a foreign Sender/Resent-* out under our signature."""
    to = f"{unique('r')}@recipient.example"
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.sendmail(f"app@{tenant.domain}", [to], _plain_mail(
                f"app@{tenant.domain}", f"{header}: boss@foreign-sender.example\r\n", to,
                unique("spoof")))
        assert refused.value.smtp_code == 550
        reply = refused.value.smtp_error.decode()
        assert header in reply and "foreign-sender.example" in reply, reply
        # The same header naming the From domain, or another verified domain of the server,
        # is fine.
        second = f"{unique('d2')}.example.com"
        Api.data(api.post(tenant.server_path + "/domains", {"name": second}), 201)
        Api.data(api.post(tenant.server_path + f"/domains/{second}/verify"))
        for owner in (f"ops@{tenant.domain}", f"ops@{second}"):
            subject = unique("ok")
            assert client.sendmail(f"app@{tenant.domain}", [to], _plain_mail(
                f"app@{tenant.domain}", f"{header}: {owner}\r\n", to, subject)) == {}
    wait_for(lambda: len(mx.received_for(to)) == 2, 20, message="both accepted mails")


@pytest.mark.parametrize("header", ORIGINATOR_HEADERS)
def test_originator_headers_cannot_be_set_over_http(api, tenant, header):
    resp = api.post(f"{SERVER}/messages", {
        "from": f"app@{tenant.domain}", "to": ["r@recipient.example"], "subject": "x",
        "text_body": "x", "headers": {header: "boss@foreign-sender.example"}},
        server_key=tenant.api_key)
    assert Api.error(resp, 422, "ValidationError")["field"] == f"headers.{header}"

