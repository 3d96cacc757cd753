"""The SMTP gateway's protocol surface, spoken over real sockets: STARTTLS and implicit TLS,
AUTH PLAIN/LOGIN with SMTP credentials, failure limiting, relay refusal, SIZE, smuggling and
STARTTLS command injection."""
from __future__ import annotations

import smtplib
import ssl

import pytest

from chalicelib.db import session_scope
from tests.support.smtp import (RawSession, b64, client_context, make_route, open_data,
                                plain_client, simple_mail, starttls_client, tls_client)
from tests.support import Api

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")


@pytest.fixture(scope="module")
def gateway(stack):
    """A gateway of our own with an implicit-TLS listener; its failure counter is its own, so
    the wrong-password tests cannot lock 127.0.0.1 out of the stack's gateway."""
    from chalicelib.smtp.gateway import Gateway

    mp = pytest.MonkeyPatch()
    mp.setenv("SMTP_AUTH_MAX_FAILURES", "3")
    mp.setenv("SMTP_AUTH_FAILURE_DELAY_SECONDS", "0.01")
    gw = Gateway("127.0.0.1", 0, submission_ports=[0], tls_port=0)
    gw.start()
    mp.undo()
    yield gw
    gw.stop()


def inbound_messages(api, tenant, **params):
    return Api.data(api.get("/api/v2/server/inbound", server_key=tenant.api_key,
                            params=params))["messages"]


def test_ehlo_offers_starttls_size_and_auth_only_after_tls(stack, monkeypatch):
    monkeypatch.setenv("SMTP_SERVER_MAX_MESSAGE_SIZE", "123456")
    with plain_client(stack.smtp_port) as client:
        assert client.has_extn("starttls") and client.has_extn("size")
        assert client.esmtp_features["size"] == "123456"
        assert not client.has_extn("auth")
        code, reply = client.docmd("AUTH", "PLAIN " + b64("\0u\0x"))
        assert code == 538  # encryption required
        client.starttls(context=client_context())
        client.ehlo("client.test")
        assert set(client.esmtp_features["auth"].split()) == {"LOGIN", "PLAIN"}
        assert not client.has_extn("starttls")


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_auth_over_starttls(stack, tenant, mechanism):
    with starttls_client(stack.smtp_port) as client:
        client.user, client.password = "anything", tenant.smtp_key
        mech = client.auth_plain if mechanism == "PLAIN" else client.auth_login
        code, _ = client.auth(mechanism, mech)
        assert code == 235


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_auth_over_implicit_tls(gateway, tenant, mechanism):
    with tls_client(gateway.tls_port) as client:
        assert not client.has_extn("starttls")
        assert set(client.esmtp_features["auth"].split()) == {"LOGIN", "PLAIN"}
        client.user, client.password = "user", tenant.smtp_key
        mech = client.auth_plain if mechanism == "PLAIN" else client.auth_login
        assert client.auth(mechanism, mech)[0] == 235


def test_extra_submission_port_also_serves(gateway, tenant):
    assert len(gateway.ports) == 2
    with starttls_client(gateway.ports[1]) as client:
        client.login("x", tenant.smtp_key)


def test_api_key_is_not_an_smtp_password_and_failures_are_limited(gateway, tenant):
    with tls_client(gateway.tls_port) as client:
        with pytest.raises(smtplib.SMTPAuthenticationError) as wrong:
            client.login("x", tenant.api_key)
        assert wrong.value.smtp_code == 535
        for _ in range(2):
            with pytest.raises(smtplib.SMTPAuthenticationError):
                client.login("x", "not-a-key")
        # The limit is reached: even the right key is refused from this address for now.
        with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
            client.login("x", tenant.smtp_key)
        assert refused.value.smtp_code == 454
    with session_scope() as db:  # let the other tests in again
        gateway.handler.limiter.clear(db, "127.0.0.1")
    with tls_client(gateway.tls_port) as client:
        client.login("x", tenant.smtp_key)


def test_a_successful_auth_clears_the_address_failures(gateway, tenant):
    from tests.support import all_tenants

    limiter = gateway.handler.limiter
    with tls_client(gateway.tls_port) as client:
        with pytest.raises(smtplib.SMTPAuthenticationError):
            client.login("x", "not-a-key")
    with all_tenants() as db:
        assert limiter.failures(db, "127.0.0.1") > 0  # smtplib tries PLAIN, then LOGIN
    with tls_client(gateway.tls_port) as client:
        client.login("x", tenant.smtp_key)
    with all_tenants() as db:
        assert limiter.failures(db, "127.0.0.1") == 0


def test_held_credential_and_suspended_server_get_clear_replies(gateway, api, tenant):
    creds = Api.data(api.get(tenant.server_path + "/credentials"))["credentials"]
    smtp_id = next(c["id"] for c in creds if c["type"] == "SMTP")
    Api.data(api.patch(f"{tenant.server_path}/credentials/{smtp_id}", {"hold": True}))
    with tls_client(gateway.tls_port) as client:
        with pytest.raises(smtplib.SMTPAuthenticationError) as held:
            client.login("x", tenant.smtp_key)
        assert held.value.smtp_code == 535 and b"on hold" in held.value.smtp_error
    Api.data(api.patch(f"{tenant.server_path}/credentials/{smtp_id}", {"hold": False}))
    Api.data(api.post(tenant.server_path + "/suspend", {"reason": "abuse"}))
    with tls_client(gateway.tls_port) as client:
        with pytest.raises(smtplib.SMTPAuthenticationError) as suspended:
            client.login("x", tenant.smtp_key)
        assert suspended.value.smtp_code == 554 and b"suspended" in suspended.value.smtp_error
    Api.data(api.post(tenant.server_path + "/unsuspend"))


def test_unauthenticated_relay_is_refused(stack, tenant):
    with plain_client(stack.smtp_port) as client:
        client.mail("spammer@evil.example")
        code, reply = client.rcpt("victim@gmail.example")
        assert code in (530, 550), reply
        # A domain of ours without a matching route is not a relay either.
        code, _ = client.rcpt(f"nobody@{tenant.domain}")
        assert code in (530, 550)
        # And nothing can be sent without an accepted recipient.
        assert client.docmd("DATA")[0] == 503


def test_oversize_message_refused_with_552(stack, api, tenant, monkeypatch):
    monkeypatch.setenv("SMTP_SERVER_MAX_MESSAGE_SIZE", "4000")
    make_route(api, tenant, "big", mode="accept")
    rcpt = f"big@{tenant.domain}"
    with plain_client(stack.smtp_port) as client:
        assert client.esmtp_features["size"] == "4000"
        # Declared too big: refused at MAIL FROM.
        assert client.mail("a@sender.example", ["SIZE=5000"])[0] == 552
        client.rset()
        # Undeclared and too big: read to the end, then refused.
        assert client.mail("a@sender.example")[0] == 250
        assert client.rcpt(rcpt)[0] == 250
        big = simple_mail("a@sender.example", rcpt, "Big", ("y" * 70 + "\r\n") * 80)
        code, reply = client.data(big)
        assert code == 552, reply
        client.sendmail("a@sender.example", [rcpt], simple_mail("a@sender.example", rcpt, "Small"))
    assert [m["subject"] for m in inbound_messages(api, tenant)] == ["Small"]


SMUGGLING = [
    b"\n.\n",        # bare LF dot bare LF
    b"\n.\r\n",      # bare LF dot CRLF
    b"\r.\r",        # bare CR dot bare CR
    b"\r\n.\r",      # CRLF dot bare CR
    b"\r.\r\n",      # bare CR dot CRLF
    b"\r\n.\n",      # CRLF dot bare LF
]


@pytest.mark.parametrize("sequence", SMUGGLING, ids=lambda s: repr(s))
def test_smuggling_never_splits_one_submission(stack, api, tenant, sequence):
    """Only CRLF . CRLF ends DATA. A lone dot next to a bare LF or CR is refused at once
    (550 5.5.2) and the connection closed: the smuggled commands are never read, nothing is
    stored, and a client that meant it as the end is not left waiting (issue 32 item 5;
    before, the first message was stored with the dot line in it)."""
    make_route(api, tenant, "smuggle", mode="accept")
    rcpt = f"smuggle@{tenant.domain}"
    session = open_data(stack.smtp_port, "a@sender.example", rcpt)
    try:
        smuggled = (b"From: a@sender.example\r\nSubject: first\r\n\r\nbody" + sequence +
                    b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<" + rcpt.encode() +
                    b">\r\nDATA\r\nFrom: a@sender.example\r\nSubject: smuggled\r\n\r\nevil\r\n")
        session.send(smuggled + b".\r\n")
        code, reply = session.reply()
        assert code == 550 and reply.startswith("550 5.5.2 ") and "bare LF or CR" in reply
        with pytest.raises(ConnectionError):  # closed: nothing after it was read
            session.reply()
    finally:
        session.close()
    assert inbound_messages(api, tenant) == []


def test_commands_pipelined_before_starttls_are_discarded(stack, api, tenant):
    make_route(api, tenant, "inject", mode="accept")
    session = RawSession(stack.smtp_port)
    try:
        session.command("EHLO raw.test")
        # STARTTLS with commands injected behind it in the same packet (CVE-2024-34083).
        session.send(b"STARTTLS\r\nEHLO injected.test\r\nMAIL FROM:<injected@evil.example>\r\n")
        assert session.reply()[0] == 220
        session.sock = client_context().wrap_socket(session.sock, server_hostname="localhost")
        session.buffer = b""
        # Had the injected EHLO and MAIL run inside the TLS session, this RCPT would be
        # accepted (and their replies would arrive first); the session starts clean instead.
        code, reply = session.command(f"RCPT TO:<inject@{tenant.domain}>")
        assert code == 503, reply
        assert session.command("EHLO raw.test")[0] == 250
        assert session.command("MAIL FROM:<a@sender.example>")[0] == 250
    finally:
        session.close()


def test_tls_certificate_is_served_on_both_kinds_of_listener(gateway):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with smtplib.SMTP_SSL("127.0.0.1", gateway.tls_port, context=context, timeout=10) as c:
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
    with smtplib.SMTP("127.0.0.1", gateway.port, timeout=10) as c:
        c.starttls(context=context)
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
