"""What the gateway owes the SMTP standards, over real sockets: the extensions it offers
(PIPELINING, ENHANCEDSTATUSCODES), an enhanced status code on every reply (RFC 2034), bare
line feeds in DATA, long lines (liberal inbound), and quiet logs for expected events."""
from __future__ import annotations

import logging
import re
import socket

import pytest

from tests.support.smtp import (RawSession, b64, make_route, open_data, plain_client,
                                starttls_client)
from tests.support import unique, wait_for
from tests.support.smtp import inbound, stored_raw

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")

SERVER = "/api/v2/server"
CODED = re.compile(r"^[245]\d\d [245]\.\d{1,3}\.\d{1,3} ")


def coded(reply: str) -> bool:
    return bool(CODED.match(reply)) and reply[0] == reply[4]






def test_ehlo_offers_pipelining_and_enhanced_status_codes(stack):
    with plain_client(stack.smtp_port) as client:
        for extension in ("pipelining", "enhancedstatuscodes", "8bitmime", "smtputf8", "size",
                          "starttls"):
            assert client.has_extn(extension), extension
    session = RawSession(stack.smtp_port)
    try:
        code, text = session.command("EHLO plain.test")
    finally:
        session.close()
    lines = text.splitlines()
    # RFC 2034: the EHLO answer itself carries no enhanced codes.
    assert code == 250 and lines[-1] == "250 HELP" and not any(coded(line) for line in lines)
    assert "250-PIPELINING" in lines and "250-ENHANCEDSTATUSCODES" in lines


def test_pipelined_transaction_with_one_refused_recipient(stack, api, tenant):
    make_route(api, tenant, "piped", mode="accept")
    good, bad = f"piped@{tenant.domain}", f"nobody-{unique('x')}@{tenant.domain}"
    session = RawSession(stack.smtp_port)
    try:
        session.command("EHLO pipe.test")
        # One write: MAIL, two RCPTs (the second refused) and DATA; the answers in order.
        session.send(f"MAIL FROM:<a@sender.example>\r\nRCPT TO:<{good}>\r\n"
                     f"RCPT TO:<{bad}>\r\nDATA\r\n".encode())
        answers = [session.reply() for _ in range(4)]
        assert [code for code, _ in answers] == [250, 250, 550, 354]
        assert all(coded(text) for _, text in answers[:3])
        session.send(b"From: a@sender.example\r\nSubject: piped\r\n\r\nhello\r\n.\r\n"
                     b"QUIT\r\n")
        code, text = session.reply()
        assert code == 250 and coded(text)
        assert session.reply()[1].startswith("221 2.0.0")
    finally:
        session.close()
    [message] = inbound(api, tenant, query="piped")
    assert message["rcpt_to"] == good


def test_every_reply_has_an_enhanced_status_code(stack, api, tenant, monkeypatch):
    monkeypatch.setenv("SMTP_SERVER_MAX_MESSAGE_SIZE", "2000")
    make_route(api, tenant, "codes", mode="accept")
    session = RawSession(stack.smtp_port)
    replies = []
    try:
        for line in ["EHLO codes.test", "NOOP", "RSET", "DATA", "MAIL", "MAIL FROM:bad address>",
                     "RCPT TO:<x@y.example>", "FOO", "HELP", "VRFY someone", "EXPN list",
                     "MAIL FROM:<a@sender.example> SIZE=999999",
                     "MAIL FROM:<a@sender.example> BODY=9BIT",
                     "MAIL FROM:<a@sender.example> SMTPUTF8=yes",
                     "MAIL FROM:<a@sender.example> FOO=1",
                     "AUTH PLAIN " + b64("\0u\0x"),
                     "MAIL FROM:<a@sender.example>", "MAIL FROM:<b@sender.example>",
                     f"RCPT TO:<codes@{tenant.domain}> FOO=1", "DATA x"]:
            replies.append((line, session.command(line)[1]))
        session.command(f"RCPT TO:<codes@{tenant.domain}>")
        assert session.command("DATA")[0] == 354
        session.send(b"Subject: big\r\n\r\n" + b"x" * 70 * 40 + b"\r\n.\r\n")
        replies.append(("DATA (too big)", session.reply()[1]))
        session.send("x".encode() * 600 + b"\r\n")  # a command line over the limit
        replies.append(("long command", session.reply()[1]))
        replies.append(("QUIT", session.command("QUIT")[1]))
    finally:
        session.close()
    by_command = dict(replies)
    for command, reply in replies[1:]:
        assert coded(reply), (command, reply)
    assert by_command["DATA (too big)"] == "552 5.3.4 Message too big: the limit is 2000 octets"
    assert by_command["MAIL FROM:<a@sender.example> SIZE=999999"].startswith("552 5.3.4 ")
    assert by_command["NOOP"] == "250 2.0.0 OK" and by_command["QUIT"] == "221 2.0.0 Bye"
    assert by_command["DATA"].startswith("503 5.5.1 ")
    assert by_command["FOO"].startswith("500 5.5.2 ")
    assert by_command["MAIL FROM:<b@sender.example>"].startswith("503 5.5.1 ")


def test_bare_line_feeds_are_line_breaks(stack, api, tenant):
    """A message written with bare LF (lines.py): each LF is a line break, stored as CRLF;
    a dot-stuffed line after one is unstuffed; a 4 KB message of short LF lines is not
    'too long' (it was refused '500 Line too long')."""
    make_route(api, tenant, "barelf", mode="accept")
    rcpt = f"barelf@{tenant.domain}"
    body = "".join(f"line {i} of a message written with bare line feeds\n" for i in range(80))
    data = (f"From: a@sender.example\nTo: {rcpt}\nSubject: bare\n\n{body}..dot-stuffed\n"
            "last\r\n.\r\n").encode()
    assert len(data) > 4000
    session = open_data(stack.smtp_port, "a@sender.example", rcpt)
    try:
        session.send(data)
        code, text = session.reply()
        assert code == 250, text
    finally:
        session.close()
    [message] = inbound(api, tenant, query="bare")
    raw = stored_raw(message["id"])
    assert b"\r\n.dot-stuffed\r\nlast\r\n" in raw and b"..dot" not in raw
    assert raw.count(b"\n") == raw.count(b"\r\n") and b"line 79 of a" in raw


def test_a_message_ending_with_bare_lf_dot_is_answered_not_left_waiting(stack, api, tenant):
    make_route(api, tenant, "lfend", mode="accept")
    session = open_data(stack.smtp_port, "a@sender.example", f"lfend@{tenant.domain}")
    try:
        session.sock.settimeout(10)  # the answer comes at once; before, never
        session.send(b"Subject: lf end\n\nbody\n.\n")
        code, text = session.reply()
        assert code == 550 and text.startswith("550 5.5.2")
    finally:
        session.close()
    assert inbound(api, tenant, query="lf end") == []


def test_long_lines_are_accepted_inbound_and_kept_intact(stack, api, tenant, monkeypatch):
    """Liberal inbound (issue 34 item 7): a line over 998 octets (it was '500 Line too long'
    at the end of DATA) is stored as it came; the message size limit still holds."""
    monkeypatch.setenv("SMTP_SERVER_MAX_MESSAGE_SIZE", "20000")
    make_route(api, tenant, "longline", mode="accept")
    rcpt = f"longline@{tenant.domain}"
    html = "<p>" + "an unwrapped line of HTML " * 400 + "</p>"  # 10 KB on one line
    with plain_client(stack.smtp_port) as client:
        client.sendmail("a@sender.example", [rcpt],
                        f"From: a@sender.example\r\nSubject: long\r\n\r\n{html}\r\n".encode())
    session = open_data(stack.smtp_port, "a@sender.example", rcpt)  # no SIZE declared
    try:
        session.send(f"Subject: huge\r\n\r\n{'y' * 30000}\r\n.\r\n".encode())
        assert session.reply()[1] == "552 5.3.4 Message too big: the limit is 20000 octets"
        assert session.command("NOOP")[0] == 250  # the session goes on
    finally:
        session.close()
    [message] = inbound(api, tenant, query="long")
    assert f"\r\n{html}\r\n".encode() in stored_raw(message["id"])


def test_an_authenticated_session_logs_no_deprecation_warning(stack, tenant, caplog):
    caplog.set_level(logging.INFO)
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]


@pytest.mark.parametrize("after_starttls", [b"\x16\x03\x01\x00\x05hello", b""])
def test_a_client_dropping_during_starttls_is_one_info_line(stack, caplog, after_starttls):
    caplog.set_level(logging.INFO)
    session = RawSession(stack.smtp_port)
    session.command("EHLO drop.test")
    assert session.command("STARTTLS")[0] == 220
    session.send(after_starttls)
    session.sock.shutdown(socket.SHUT_RDWR)
    session.close()
    if after_starttls:
        wait_for(lambda: [r for r in caplog.records
                          if r.getMessage() == "smtp.starttls_failed"], 10,
                 message="the starttls_failed line")
    else:
        wait_for(lambda: [r for r in caplog.records if "connection lost" in r.getMessage()
                          or "EOF received" in r.getMessage()], 10, message="the drop")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info]
    assert len([r for r in caplog.records if r.getMessage() == "smtp.starttls_failed"]) <= 1
