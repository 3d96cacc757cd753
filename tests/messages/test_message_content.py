"""A sent message as its recipient reads it (content, attachments, the HTML in a mail frame),
and the message list's date range."""
from __future__ import annotations

import base64
from datetime import timedelta

from chalicelib import clock
from tests.support.sending import rfc3339
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support import Api

SERVER = "/api/v2/server"


def test_a_sent_message_reads_as_its_recipient_sees_it(api, tenant, mx):
    report = b"%PDF-1.4 not really\n"
    [r] = sent_ok(api, tenant, subject="Report", text_body="See the report.",
                  html_body='<h1 style="font-family:serif">Report</h1>'
                            '<a href="https://example.com/r">read</a>',
                  attachments=[{"name": "report.pdf", "content_type": "application/pdf",
                                "data_base64": base64.b64encode(report).decode()}])["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    content = Api.data(api.get(f"{SERVER}/messages/{r['id']}/content",
                               server_key=tenant.api_key))
    assert content["message_id"] == r["id"]
    body = content["content"]
    assert body["text_body"].strip() == "See the report."
    assert '<h1 style="font-family:serif">Report</h1>' in body["html_body"]
    [attachment] = body["attachments"]
    assert (attachment["filename"], attachment["content_type"], attachment["size"]) == \
        ("report.pdf", "application/pdf", len(report))
    got = Api.data(api.get(f"{SERVER}/messages/{r['id']}/attachments/0",
                           server_key=tenant.api_key))["attachment"]
    assert base64.b64decode(got["content_base64"]) == report
    Api.error(api.get(f"{SERVER}/messages/{r['id']}/attachments/1", server_key=tenant.api_key),
              404, "NotFound")
    # What went out carries the open pixel and the click-tracking link; the frame does not:
    # looking at a message in the console is not an open, and its links are the tenant's own.
    sent = Api.data(api.get(f"{SERVER}/messages/{r['id']}/raw", server_key=tenant.api_key))
    assert "/t/" in base64.b64decode(sent["raw_base64"]).decode().replace("=\r\n", "")
    frame = Api.data(api.post(f"{SERVER}/mail_frames", {"kind": "message", "id": str(r["id"])},
                              server_key=tenant.api_key), 201)["mail_frame"]
    page = api.http.get(api.base_url + frame["path"])
    assert page.status_code == 200 and 'style="font-family:serif"' in page.text
    assert "/t/" not in page.text and 'href="https://example.com/r"' in page.text
    # Another server's message is nobody's business here.
    other = sent_ok(api, tenant)["recipients"][0]["id"]
    Api.error(api.post(f"{SERVER}/mail_frames", {"kind": "message", "id": "999999999"},
                       server_key=tenant.api_key), 404, "NotFound")
    Api.error(api.post(f"{SERVER}/mail_frames", {"kind": "message"},
                       server_key=tenant.api_key), 400, "ParameterMissing")
    err = Api.error(api.post(f"{SERVER}/mail_frames", {"kind": "message", "id": str(other)},
                             server_key=tenant.api_key), 422, "ValidationError")
    assert "no HTML part" in err["message"]


def test_the_message_list_takes_a_date_range(api, tenant):
    [old] = sent_ok(api, tenant, to=[rcpt("old")], send_at=rfc3339(
        clock.now() + timedelta(days=20)))["recipients"]
    clock.advance(timedelta(days=2))
    middle = rfc3339(clock.now() - timedelta(days=1))
    [new] = sent_ok(api, tenant, to=[rcpt("new")], send_at=rfc3339(
        clock.now() + timedelta(days=20)))["recipients"]

    def ids(**params) -> list[int]:
        return [m["id"] for m in Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                                                  params=params))["messages"]]

    assert ids() == [new["id"], old["id"]]
    assert ids(**{"from": middle}) == [new["id"]]
    assert ids(to=middle) == [old["id"]]
    assert ids(**{"from": middle, "to": rfc3339(clock.now() + timedelta(minutes=1))}) == \
        [new["id"]]
    err = Api.error(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                            params={"from": middle, "to": middle}), 422, "ValidationError")
    assert err["field"] == "to"
    Api.error(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                      params={"from": "yesterday"}), 422, "ValidationError")
