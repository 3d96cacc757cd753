"""Inbound routes over the management API, and inbound mail through the real SMTP gateway to
loopback endpoints (HTTP and SMTP), held mail released by bypass, retries visible."""
from __future__ import annotations

import base64
import smtplib

import pytest

from tests.support.smtp import Receiver, make_route, plain_client, simple_mail
from tests.support import Api, unique, wait_for


@pytest.fixture
def receiver():
    rec = Receiver()
    yield rec
    rec.close()


def inbound(api, tenant, path="", **params):
    return Api.data(api.get(f"/api/v2/server/inbound{path}", server_key=tenant.api_key,
                            params=params))


def test_route_crud_and_validation(api, tenant, receiver):
    route = make_route(api, tenant, "support", endpoint={"type": "http", "url": receiver.url})
    assert route["address"] == f"support@{tenant.domain}"
    assert route["endpoint"] == {"type": "http", "url": receiver.url, "format": "json"}
    base = tenant.server_path + "/routes"
    listed = Api.data(api.get(base))["routes"]
    assert [r["id"] for r in listed] == [route["id"]]
    updated = Api.data(api.patch(f"{base}/{route['id']}", {"mode": "hold"}))["route"]
    assert updated["mode"] == "hold" and updated["endpoint"]["url"] == receiver.url
    shown = Api.data(api.get(f"{base}/{route['id']}"))["route"]
    assert shown["mode"] == "hold"
    # Field-named errors.
    err = Api.error(api.post(base, {"name": "x", "domain": tenant.domain, "mode": "endpoint"}),
                    400, "ParameterMissing")
    assert err["field"] == "endpoint"
    err = Api.error(api.post(base, {"name": "bad name", "domain": tenant.domain,
                                    "mode": "accept"}), 422, "ValidationError")
    assert err["field"] == "name"
    err = Api.error(api.post(base, {"name": "y", "domain": tenant.domain, "mode": "endpoint",
                                    "endpoint": {"type": "http", "url": "ftp://x"}}),
                    422, "ValidationError")
    assert err["field"] == "endpoint.url"
    err = Api.error(api.post(base, {"name": "z", "domain": tenant.domain, "mode": "teleport"}),
                    422, "ValidationError")
    assert err["field"] == "mode"
    Api.error(api.post(base, {"name": "z", "domain": "other.example.org", "mode": "accept"}),
              404, "NotFound")
    err = Api.error(api.post(base, {"name": "support", "domain": tenant.domain,
                                    "mode": "accept"}), 422, "ValidationError")
    assert "already exists" in err["message"]
    Api.error(api.get(f"{base}/999999"), 404, "NotFound")
    assert Api.data(api.delete(f"{base}/{route['id']}"))["deleted"] is True
    Api.error(api.get(f"{base}/{route['id']}"), 404, "NotFound")


def test_inbound_mail_reaches_http_endpoint_as_json(stack, api, tenant, receiver):
    make_route(api, tenant, "orders", endpoint={"type": "http", "url": receiver.url})
    rcpt = f"orders@{tenant.domain}"
    raw = (f"From: Alice <alice@sender.example>\r\nTo: {rcpt}\r\nSubject: Order 42\r\n"
           "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n"
           "--XX\r\nContent-Type: text/plain\r\n\r\nplease ship\r\n"
           "--XX\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; "
           "filename=a.pdf\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERg==\r\n--XX--\r\n")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("alice@sender.example", [rcpt], raw.encode())
    wait_for(lambda: receiver.requests, message="endpoint POST")
    payload = receiver.json()
    assert payload["message"]["rcpt_to"] == rcpt
    assert payload["message"]["mail_from"] == "alice@sender.example"
    assert payload["message"]["scope"] == "incoming"
    assert payload["subject"] == "Order 42"
    assert payload["from"][0]["email"] == "alice@sender.example"
    assert payload["plain_body"].strip() == "please ship"
    assert payload["attachments"][0]["filename"] == "a.pdf"
    assert base64.b64decode(payload["attachments"][0]["data_base64"]) == b"%PDF"
    assert b"Subject: Order 42" in base64.b64decode(payload["raw_message"])
    assert receiver.requests[0]["headers"]["X-Service-Signature"]
    message_id = payload["message"]["id"]
    shown = wait_for(lambda: (m := inbound(api, tenant, f"/{message_id}")["message"])
                     ["status"] == "Delivered" and m)
    assert shown["deliveries"][0]["code"] == 200


def test_raw_format_endpoint_gets_mime_source(stack, api, tenant, receiver):
    make_route(api, tenant, "raw", endpoint={"type": "http", "url": receiver.url,
                                             "format": "raw"})
    with plain_client(stack.smtp_port) as client:
        client.sendmail("bob@sender.example", [f"raw@{tenant.domain}"],
                        simple_mail("bob@sender.example", f"raw@{tenant.domain}", "Raw one"))
    wait_for(lambda: receiver.requests, message="endpoint POST")
    request = receiver.requests[0]
    assert request["headers"]["Content-Type"] == "message/rfc822"
    assert request["body"].startswith(b"Received: from client.test")
    assert b"\r\nSubject: Raw one\r\n" in request["body"]


def test_held_inbound_delivered_after_bypass(stack, api, tenant, receiver):
    make_route(api, tenant, "held", mode="hold",
               endpoint={"type": "http", "url": receiver.url})
    subject = unique("held")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("carol@sender.example", [f"held@{tenant.domain}"],
                        simple_mail("carol@sender.example", f"held@{tenant.domain}", subject))
    found = inbound(api, tenant, held="true", query=subject)["messages"]
    assert len(found) == 1 and found[0]["status"] == "Held" and found[0]["held"] is True
    assert not receiver.requests
    message_id = found[0]["id"]
    # Retry is not the way out of a hold.
    Api.error(api.post(f"/api/v2/server/inbound/{message_id}/retry", server_key=tenant.api_key),
              422, "ValidationError")
    released = Api.data(api.post(f"/api/v2/server/inbound/{message_id}/bypass",
                                 server_key=tenant.api_key))["message"]
    assert released["held"] is False
    wait_for(lambda: receiver.requests, message="delivery after bypass")
    assert receiver.json()["subject"] == subject
    wait_for(lambda: inbound(api, tenant, f"/{message_id}")["message"]["status"] == "Delivered")
    Api.error(api.post(f"/api/v2/server/inbound/{message_id}/bypass", server_key=tenant.api_key),
              422, "ValidationError")


def test_failing_endpoint_retries_visibly_then_retry_requeues(stack, api, tenant, monkeypatch):
    monkeypatch.setenv("TIME_SCALE", "0.0005")
    monkeypatch.setenv("INBOUND_MAX_ATTEMPTS", "2")
    rec = Receiver(statuses=(503, 503, 200))
    try:
        make_route(api, tenant, "flaky", endpoint={"type": "http", "url": rec.url})
        with plain_client(stack.smtp_port) as client:
            client.sendmail("dave@sender.example", [f"flaky@{tenant.domain}"],
                            simple_mail("dave@sender.example", f"flaky@{tenant.domain}", "Flaky"))
        message_id = wait_for(lambda: rec.requests, message="first attempt") and \
            rec.json()["message"]["id"]
        failed = wait_for(lambda: (m := inbound(api, tenant, f"/{message_id}")["message"])
                          ["status"] == "Failed" and m, message="Failed after 2 attempts")
        assert failed["attempts"] == 2
        assert [d["code"] for d in failed["deliveries"]] == [503, 503]
        assert "gave up after 2 attempts" in failed["status_details"]
        assert inbound(api, tenant, status="Failed")["messages"][0]["id"] == message_id
        Api.data(api.post(f"/api/v2/server/inbound/{message_id}/retry",
                          server_key=tenant.api_key))
        wait_for(lambda: inbound(api, tenant, f"/{message_id}")["message"]["status"]
                 == "Delivered", message="delivered after retry")
        assert len(rec.requests) == 3
    finally:
        rec.close()


def test_smtp_endpoint_receives_the_message(stack, api, tenant):
    from aiosmtpd.controller import Controller

    received = []

    class Sink:
        async def handle_DATA(self, server, session, envelope):
            received.append((envelope.mail_from, envelope.rcpt_tos, envelope.original_content))
            return "250 OK"

    from tests.support import free_port

    port = free_port()
    sink = Controller(Sink(), hostname="127.0.0.1", port=port)
    sink.start()
    try:
        make_route(api, tenant, "relay", endpoint={"type": "smtp", "host": "127.0.0.1",
                                                   "port": port})
        with plain_client(stack.smtp_port) as client:
            client.sendmail("erin@sender.example", [f"relay@{tenant.domain}"],
                            simple_mail("erin@sender.example", f"relay@{tenant.domain}", "Relayed"))
        wait_for(lambda: received, message="SMTP endpoint delivery")
        mail_from, rcpts, content = received[0]
        assert mail_from == "erin@sender.example" and rcpts == [f"relay@{tenant.domain}"]
        assert b"Subject: Relayed" in content
    finally:
        sink.stop()


def test_modes_reject_bounce_accept_and_wildcard(stack, api, tenant):
    make_route(api, tenant, "nope", mode="reject")
    make_route(api, tenant, "back", mode="bounce")
    make_route(api, tenant, "*", mode="accept")
    with plain_client(stack.smtp_port) as client:
        client.mail("frank@sender.example")
        code, _ = client.rcpt(f"nope@{tenant.domain}")
        assert code == 550
        client.rset()
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.sendmail("frank@sender.example", [f"back@{tenant.domain}"],
                            simple_mail("frank@sender.example", f"back@{tenant.domain}", "B"))
        assert refused.value.smtp_code == 550
        client.sendmail("frank@sender.example", [f"anything+tag@{tenant.domain}"],
                        simple_mail("frank@sender.example", "x", "Wild"))
    statuses = {m["rcpt_to"]: m["status"] for m in inbound(api, tenant)["messages"]}
    assert statuses[f"back@{tenant.domain}"] == "Bounced"
    assert statuses[f"anything+tag@{tenant.domain}"] == "Accepted"
    assert f"nope@{tenant.domain}" not in statuses
    Api.error(api.get("/api/v2/server/inbound", server_key=tenant.api_key,
                      params={"status": "Weird"}), 422, "ValidationError")
    Api.error(api.get("/api/v2/server/inbound/99999999", server_key=tenant.api_key),
              404, "NotFound")


def test_gateway_reuses_a_found_route_for_its_cache_time_only(stack, api, tenant, monkeypatch):
    """A found route is reused for SMTP_ROUTE_CACHE_SECONDS (no lookup per RCPT); a refusal
    is never kept, and with 0 every RCPT is looked up again."""
    rcpt = f"cached@{tenant.domain}"
    with plain_client(stack.smtp_port) as client:
        client.mail("gina@sender.example")
        assert client.rcpt(rcpt)[0] == 530  # no route yet, and the refusal is not kept
        client.rset()
        route = make_route(api, tenant, "cached", mode="accept")
        monkeypatch.setenv("SMTP_ROUTE_CACHE_SECONDS", "3600")
        client.sendmail("gina@sender.example", [rcpt], simple_mail("gina@sender.example", rcpt))
        client.sendmail("gina@sender.example", [rcpt.upper()],
                        simple_mail("gina@sender.example", rcpt, "Second"))
        Api.data(api.delete(f"{tenant.server_path}/routes/{route['id']}"))
        # Within the cache time the gateway still finds the removed route, cannot store the
        # mail (its route row is gone) and answers 451, then forgets the address...
        with pytest.raises(smtplib.SMTPDataError) as later:
            client.sendmail("gina@sender.example", [rcpt],
                            simple_mail("gina@sender.example", rcpt, "Third"))
        assert later.value.smtp_code == 451
        # ...so the sender's retry is refused at RCPT.
        client.mail("gina@sender.example")
        assert client.rcpt(rcpt)[0] == 530
        client.rset()
        # With the cache off every RCPT is looked up: a route created now works at once.
        monkeypatch.setenv("SMTP_ROUTE_CACHE_SECONDS", "0")
        make_route(api, tenant, "cached", mode="reject")
        client.mail("gina@sender.example")
        assert client.rcpt(rcpt)[0] == 550
    messages = inbound(api, tenant)["messages"]
    assert sorted(m["rcpt_to"] for m in messages) == [rcpt.upper(), rcpt]


def test_inbound_subject_and_message_id_of_mail_without_a_body(stack, api, tenant):
    make_route(api, tenant, "headers", mode="accept")
    rcpt = f"headers@{tenant.domain}"
    raw = (f"From: hal@sender.example\r\nTo: {rcpt}\r\n"
           "Subject: =?utf-8?q?Caf=C3=A9?= and\r\n more\r\nMessage-ID: <only.headers@sender>\r\n")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("hal@sender.example", [rcpt], raw.encode())
    message = inbound(api, tenant)["messages"][0]
    assert message["subject"] == "Café and more"
    shown = inbound(api, tenant, f"/{message['id']}")["message"]
    assert shown.get("message_id_header", "<only.headers@sender>") == "<only.headers@sender>"


def test_a_long_line_is_stored_intact_and_re_encoded_only_when_sent_on(stack, api, tenant):
    """Issue 34 item 7: inbound mail with a line over 998 octets is accepted and stored as
    it came; sent on to an SMTP endpoint (a stock aiosmtpd, which refuses such a line with
    '500 Line too long'), its part is re-encoded (quoted-printable), content unchanged."""
    from email import policy
    from email.parser import BytesParser

    from aiosmtpd.controller import Controller

    from tests.support.smtp import stored_raw
    from tests.support import free_port

    received = []

    class Sink:
        async def handle_DATA(self, server, session, envelope):
            received.append(envelope.original_content)
            return "250 OK"

    port = free_port()
    sink = Controller(Sink(), hostname="127.0.0.1", port=port)
    sink.start()
    text = "a line nobody wrapped, " * 100
    try:
        make_route(api, tenant, "longrelay", endpoint={"type": "smtp", "host": "127.0.0.1",
                                                       "port": port})
        with plain_client(stack.smtp_port) as client:
            client.sendmail("erin@sender.example", [f"longrelay@{tenant.domain}"],
                            f"From: erin@sender.example\r\nSubject: Long relayed\r\n\r\n"
                            f"{text}\r\n".encode())
        wait_for(lambda: received, message="SMTP endpoint delivery")
    finally:
        sink.stop()
    [message] = inbound(api, tenant, query="Long relayed")["messages"]
    assert f"\r\n{text}\r\n".encode() in stored_raw(message["id"])
    sent = received[0]
    assert max(map(len, sent.split(b"\r\n"))) <= 998
    parsed = BytesParser(policy=policy.default).parsebytes(sent)
    assert parsed["Content-Transfer-Encoding"] == "quoted-printable"
    assert parsed.get_content() == text + "\r\n" or parsed.get_content() == text + "\n"


def test_held_inbound_whose_content_was_erased_fails_saying_so(stack, api, tenant, receiver):
    """Issue 35: a held inbound message erased (content retention, data removal) is not
    handed over when released: the bypass answers ContentExpired, the endpoint gets nothing
    and the record stays."""
    from chalicelib.services import content
    from tests.support import all_tenants

    make_route(api, tenant, "erased", mode="hold",
               endpoint={"type": "http", "url": receiver.url})
    subject = unique("erased")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("erin@sender.example", [f"erased@{tenant.domain}"],
                        simple_mail("erin@sender.example", f"erased@{tenant.domain}", subject))
    [found] = inbound(api, tenant, held="true", query=subject)["messages"]
    with all_tenants() as db:
        assert content.erase(db, [found["id"]]) == 1
    Api.error(api.post(f"/api/v2/server/inbound/{found['id']}/bypass",
                       server_key=tenant.api_key), 410, "ContentExpired")
    assert inbound(api, tenant, f"/{found['id']}")["message"]["content_expired_at"]
    assert not receiver.requests
