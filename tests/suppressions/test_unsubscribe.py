"""One-click unsubscribe (RFC 8058) end to end: mail of a broadcast stream reaches a real MX
with List-Unsubscribe and List-Unsubscribe-Post under a DKIM signature that dkimpy verifies
against the domain's published key; a POST to the URL (or mail to the mailto address through
the SMTP gateway) suppresses the recipient for that stream only; a GET only shows a form."""
from __future__ import annotations

import email
import re
from email import policy

import dkim.util

from tests.support.smtp import plain_client
from tests.support.sending import dns_txt, message, rcpt, sent_ok, verify_dkim, wait_status
from tests.support import Api, unique, wait_for

SERVER = "/api/v2/server"


def make_stream(api, tenant, stream_type: str, **fields) -> dict:
    return Api.data(api.post(f"{SERVER}/streams", {"name": unique("S"), "stream_type":
                                                    stream_type, **fields},
                             server_key=tenant.api_key), 201)["stream"]


def delivered(api, tenant, mx, to: str, **fields) -> tuple[dict, bytes]:
    [r] = sent_ok(api, tenant, to=[to], **fields)["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    [received] = wait_for(lambda: mx.received_for(to), 20, message="delivery")
    return r, received.data


def headers_of(data: bytes):
    return email.message_from_bytes(data, policy=policy.compat32)


def unsubscribe_targets(data: bytes) -> tuple[str, str]:
    """(the URL's path, the mailto address) of the List-Unsubscribe field."""
    value = " ".join(headers_of(data)["List-Unsubscribe"].split())
    url, mailto = re.findall(r"<([^>]+)>", value)
    assert url.startswith("http") and mailto.startswith("mailto:"), value
    return "/u/" + url.rsplit("/u/", 1)[1], mailto[len("mailto:"):].split("?")[0]


def suppressions(api, tenant, **query) -> list[dict]:
    return Api.data(api.get(tenant.server_path + "/suppressions",
                            params=query))["suppressions"]


def test_broadcast_mail_carries_signed_one_click_headers(api, tenant, mx):
    stream = make_stream(api, tenant, "broadcast")
    assert stream["list_unsubscribe"] is True
    to = rcpt("news")
    _, data = delivered(api, tenant, mx, to, stream=stream["permalink"],
                        headers={"List-Unsubscribe": "<https://tenant.example/own>"})
    msg = headers_of(data)
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert len(msg.get_all("List-Unsubscribe")) == 1  # the tenant's own field was replaced
    path, mailto = unsubscribe_targets(data)
    assert re.fullmatch(r"/u/\d+\.[A-Za-z0-9_-]{22}", path)
    assert mailto.endswith("@rp.mx.service.test")
    # The DKIM signature covers both fields (RFC 8058 section 4) and verifies.
    assert verify_dkim(data, dns_txt(api, tenant))
    signature = dkim.util.parse_tag_value(
        b"".join(msg["DKIM-Signature"].encode().split()))
    signed = signature[b"h"].lower().split(b":")
    assert b"list-unsubscribe" in signed and b"list-unsubscribe-post" in signed
    # Changing the URL after signing breaks the signature.
    assert not verify_dkim(data.replace(path.encode(), b"/u/1.AAAAAAAAAAAAAAAAAAAAAA"),
                           dns_txt(api, tenant))


def test_transactional_mail_has_no_header_unless_the_stream_asks(api, tenant, mx):
    to = rcpt("tx")
    _, data = delivered(api, tenant, mx, to)  # the default transactional stream
    assert headers_of(data)["List-Unsubscribe"] is None
    assert headers_of(data)["List-Unsubscribe-Post"] is None
    stream = make_stream(api, tenant, "transactional")
    assert stream["list_unsubscribe"] is False
    changed = Api.data(api.patch(f"{SERVER}/streams/{stream['permalink']}",
                                 {"list_unsubscribe": True}, server_key=tenant.api_key))
    assert changed["stream"]["list_unsubscribe"] is True
    to = rcpt("tx-opt-in")
    _, data = delivered(api, tenant, mx, to, stream=stream["permalink"])
    assert headers_of(data)["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert verify_dkim(data, dns_txt(api, tenant))
    # A broadcast stream cannot turn it off.
    broadcast = make_stream(api, tenant, "broadcast")
    error = Api.error(api.patch(f"{SERVER}/streams/{broadcast['permalink']}",
                                {"list_unsubscribe": False}, server_key=tenant.api_key),
                      422, "ValidationError")
    assert error["field"] == "list_unsubscribe"


def test_get_shows_a_form_and_post_unsubscribes_from_that_stream_only(api, tenant, mx):
    news = make_stream(api, tenant, "broadcast")
    to = rcpt("reader")
    first, data = delivered(api, tenant, mx, to, stream=news["permalink"])
    path, _ = unsubscribe_targets(data)

    page = api.get(path)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert '<form method="post">' in page.text and "<script" not in page.text.lower()
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert suppressions(api, tenant, query=to) == []  # a GET (a link scanner) changes nothing

    done = api.request("POST", path, data="List-Unsubscribe=One-Click",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert done.status_code == 200 and to.lower() in done.text
    [entry] = suppressions(api, tenant, query=to)
    assert entry["reason"] == "Unsubscribe" and entry["origin"] == "unsubscribe"
    assert entry["stream"] == news["permalink"] and entry["expires_at"] is None
    # Again: harmless, still one entry.
    assert api.request("POST", path, data="List-Unsubscribe=One-Click").status_code == 200
    assert len(suppressions(api, tenant, query=to)) == 1

    # Held on that stream, delivered on the transactional one.
    [held] = sent_ok(api, tenant, to=[to], stream=news["permalink"])["recipients"]
    assert held["status"] == "Held"
    [other] = sent_ok(api, tenant, to=[to])["recipients"]
    wait_status(api, tenant, other["id"], "Sent")
    assert message(api, tenant, first["id"])["status"] == "Sent"


def test_bad_tokens_are_404_pages(api, tenant, mx):
    news = make_stream(api, tenant, "broadcast")
    _, data = delivered(api, tenant, mx, rcpt("t"), stream=news["permalink"])
    path, _ = unsubscribe_targets(data)
    tampered = path[:-1] + ("A" if path[-1] != "A" else "B")
    for bad in (tampered, "/u/nothing", "/u/999999999.AAAAAAAAAAAAAAAAAAAAAA"):
        assert api.get(bad).status_code == 404
        response = api.request("POST", bad, data="List-Unsubscribe=One-Click")
        assert response.status_code == 404 and "not valid" in response.text
    assert suppressions(api, tenant, reason="Unsubscribe") == []


def test_mail_to_the_mailto_address_unsubscribes(stack, api, tenant, mx):
    news = make_stream(api, tenant, "broadcast")
    to = rcpt("mailer")
    _, data = delivered(api, tenant, mx, to, stream=news["permalink"])
    _, mailto = unsubscribe_targets(data)
    with plain_client(stack.smtp_port) as client:  # no AUTH: the token is the credential
        client.sendmail(to, [mailto], f"From: {to}\r\nTo: {mailto}\r\nSubject: unsubscribe"
                                      "\r\n\r\nunsubscribe\r\n".encode())
        # A forged address is refused at RCPT.
        forged = re.sub(r"\.[^.@]+@", ".AAAAAAAAAAAAAAAAAAAAAA@", mailto)
        code, _ = client.docmd("MAIL FROM:<x@example.org>")
        assert code == 250
        code, reply = client.docmd(f"RCPT TO:<{forged}>")
        assert code == 530 or code == 550, reply
    [entry] = suppressions(api, tenant, query=to)
    assert entry["reason"] == "Unsubscribe" and entry["stream"] == news["permalink"]
