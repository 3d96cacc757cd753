"""The captured-mail inbox through the API of the running stack: mail kept by
DELIVERY_RELAY=capture (without files: the database is where it lives) and by a server in
Development mode (at submission, and by the worker after a switch); listing, searching,
reading (headers, text, HTML in a mail frame with its inline image, attachments, raw),
removing and clearing, behind the same roles as messages."""
from __future__ import annotations

import base64
from datetime import timedelta

from chalicelib import clock
from tests.support.accounts import make_user
from tests.support.sending import later, set_server
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support import Api, make_tenant, wait_for
from tests.support.captured import PIXEL, rich, submit

SERVER = "/api/v2/server"


def inbox(api, tenant, **params) -> dict:
    return Api.data(api.get(f"{SERVER}/captured", server_key=tenant.api_key,
                            params={"per_page": 100, **params}))






def only_message(api, tenant, to: str) -> dict:
    return wait_for(lambda: (found := Api.data(api.get(
        f"{SERVER}/messages", server_key=tenant.api_key, params={"query": to}))["messages"])
        and found[0], message=f"the message to {to}")


def test_captured_mail_lives_in_the_database_and_reads_like_mail(stack, api, tenant,
                                                                 monkeypatch, tmp_path):
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", "")  # as deployed: no disk, the rows are the truth
    monkeypatch.chdir(tmp_path)
    to = rcpt("inv")
    submit(stack, tenant, to, rich(tenant, to))
    first = only_message(api, tenant, to)
    # Captured one after the other (two wake-ups may otherwise be worked in either order,
    # and the inbox lists the last captured first).
    wait_status(api, tenant, first["id"], "Sent")
    [second] = sent_ok(api, tenant, to=[rcpt("plain")], subject="Plain words")["recipients"]
    wait_status(api, tenant, second["id"], "Sent")
    shown = wait_status(api, tenant, first["id"], "Sent")
    assert "captured-mail inbox" in shown["deliveries"][0]["details"]
    assert list(tmp_path.iterdir()) == []  # no file anywhere

    listed = inbox(api, tenant)
    assert [c["message_id"] for c in listed["captured"]] == [second["id"], first["id"]]
    assert {c["reason"] for c in listed["captured"]} == {"capture"}
    assert [c["message_id"] for c in inbox(api, tenant, query="invoice")["captured"]] \
        == [first["id"]]
    assert inbox(api, tenant, query=to.upper())["pagination"]["total"] == 1
    assert inbox(api, tenant, reason="development")["captured"] == []

    entry = next(c for c in listed["captured"] if c["message_id"] == first["id"])
    detail = Api.data(api.get(f"{SERVER}/captured/{entry['id']}", server_key=tenant.api_key))
    content = detail["content"]
    assert content["text_body"].strip() == "Invoice attached."
    assert 'src="cid:logo"' in content["html_body"]
    assert {h["name"]: h["value"] for h in content["headers"]}["Subject"] == "Your invoice"
    names = [(a["filename"], a["content_type"], a["inline"]) for a in content["attachments"]]
    assert ("invoice.csv", "text/csv", False) in names
    csv = next(a for a in content["attachments"] if a["filename"] == "invoice.csv")
    got = Api.data(api.get(f"{SERVER}/captured/{entry['id']}/attachments/{csv['index']}",
                           server_key=tenant.api_key))["attachment"]
    assert base64.b64decode(got["content_base64"]) == b"item,amount\nwidget,3\n"
    Api.error(api.get(f"{SERVER}/captured/{entry['id']}/attachments/9",
                      server_key=tenant.api_key), 404, "NotFound")
    Api.error(api.get(f"{SERVER}/captured/{entry['id']}/attachments/x",
                      server_key=tenant.api_key), 404, "NotFound")

    # The raw source: exactly the signed bytes the message shows.
    raw = Api.data(api.get(f"{SERVER}/captured/{entry['id']}/raw", server_key=tenant.api_key))
    sent = Api.data(api.get(f"{SERVER}/messages/{first['id']}/raw", server_key=tenant.api_key))
    assert raw["signed"] and raw["raw_base64"] == sent["raw_base64"]
    assert "DKIM-Signature:" in raw["raw"]

    # The HTML in a mail frame: styled, its inline image in place, no open pixel.
    frame = Api.data(api.post(f"{SERVER}/mail_frames", {"kind": "captured", "id": str(entry["id"])},
                              server_key=tenant.api_key), 201)["mail_frame"]
    page = api.http.get(api.base_url + frame["path"])
    assert page.status_code == 200 and "sandbox" in page.headers["Content-Security-Policy"]
    assert 'style="color:#c00"' in page.text and f"data:image/png;base64,{PIXEL}" in page.text
    assert "/t/" not in page.text and "https://shop.example.com/i/1" in page.text
    plain = next(c for c in listed["captured"] if c["message_id"] == second["id"])
    err = Api.error(api.post(f"{SERVER}/mail_frames", {"kind": "captured", "id": str(plain["id"])},
                             server_key=tenant.api_key), 422, "ValidationError")
    assert "no HTML part" in err["message"]

    # Removing one and clearing: the inbox empties, the messages and their history stay.
    gone = Api.data(api.delete(f"{SERVER}/captured/{plain['id']}", server_key=tenant.api_key))
    assert gone["deleted"] is True and gone["captured"]["message_id"] == second["id"]
    Api.error(api.get(f"{SERVER}/captured/{plain['id']}", server_key=tenant.api_key), 404,
              "NotFound")
    assert Api.data(api.delete(f"{SERVER}/captured", server_key=tenant.api_key)) == {"cleared": 1}
    assert inbox(api, tenant)["captured"] == []
    assert wait_status(api, tenant, first["id"], "Sent")["events"][0]["event"] == "MessageSent"


def test_a_development_server_keeps_its_mail_in_the_inbox(stack, api, tenant, mx):
    set_server(api, tenant, mode="Development")
    to = rcpt("dev")
    submit(stack, tenant, to, rich(tenant, to))
    held = only_message(api, tenant, to)
    assert held["status"] == "Held"
    [entry] = inbox(api, tenant)["captured"]
    assert (entry["message_id"], entry["reason"], entry["status"]) == (held["id"], "development",
                                                                       "Held")
    raw = Api.data(api.get(f"{SERVER}/captured/{entry['id']}/raw", server_key=tenant.api_key))
    assert raw["signed"] is False and "Invoice attached." in raw["raw"]  # as submitted
    assert mx.received_for(held["rcpt_to"]) == []


def test_a_switch_to_development_sends_queued_mail_to_the_inbox(api, tenant, mx):
    [scheduled] = sent_ok(api, tenant, send_at=later(hours=1))["recipients"]
    assert inbox(api, tenant)["captured"] == []
    set_server(api, tenant, mode="Development")
    clock.advance(timedelta(hours=1, seconds=5))
    wait_status(api, tenant, scheduled["id"], "Held")
    [entry] = wait_for(lambda: inbox(api, tenant)["captured"], message="the inbox entry")
    assert (entry["message_id"], entry["reason"]) == (scheduled["id"], "development")


def test_the_inbox_is_behind_the_roles_of_messages(api, monkeypatch):
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", "")
    tenant, other = make_tenant(api), make_tenant(api)
    [r] = sent_ok(api, tenant)["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    [entry] = inbox(api, tenant)["captured"]
    # Another server's key sees nothing of it.
    Api.error(api.get(f"{SERVER}/captured/{entry['id']}", server_key=other.api_key), 404,
              "NotFound")
    assert inbox(api, other)["captured"] == []
    viewer, member = make_user(api), make_user(api)
    for person, role in ((viewer, "viewer"), (member, "member")):
        Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                          {"user_id": person.id, "role": role}), 201)
    as_user = {"X-Server": f"{tenant.org}/{tenant.server}"}
    listed = Api.data(api.get(f"{SERVER}/captured", bearer=viewer.token, headers=as_user))
    assert [c["id"] for c in listed["captured"]] == [entry["id"]]
    Api.error(api.delete(f"{SERVER}/captured", bearer=viewer.token, headers=as_user), 403,
              "Forbidden")
    Api.error(api.delete(f"{SERVER}/captured", bearer=make_user(api).token, headers=as_user),
              404, "NotFound")
    assert Api.data(api.delete(f"{SERVER}/captured", bearer=member.token,
                               headers=as_user)) == {"cleared": 1}
