"""Sending end to end: HTTP send -> submission -> queue -> delivery worker -> a real aiosmtpd
MX on loopback that answers what each test scripts."""
from __future__ import annotations

import base64

import pytest

from tests.mx import ScriptedMX
from tests.support import Api, make_tenant, unique
from tests.support.sending import SERVER, dns_txt, message, rcpt, send, sent_ok, verify_dkim, wait_status


def test_accepted_signed_and_recorded(api, tenant, mx):
    to = rcpt("ok")
    result = sent_ok(api, tenant, to=[{"email": to, "name": "Zoë Ünicode"}],
                     subject="Grüße ✓", html_body="<p>Hello <b>world</b></p>",
                     tag="welcome", metadata={"user": 42})
    assert isinstance(result["message_id"], int)
    [recipient] = result["recipients"]
    assert recipient["rcpt_to"] == to and recipient["id"] and recipient["token"]

    shown = wait_status(api, tenant, recipient["id"], "Sent")
    assert shown["tag"] == "welcome" and shown["metadata"] == {"user": 42}
    assert shown["stream"] == "outbound" and shown["submission_id"] == result["message_id"]
    assert [e["event"] for e in shown["events"]] == ["MessageSent"]

    [received] = mx.received_for(to)
    assert received.mail_from == f"{recipient['token']}@rp.{tenant.domain}"  # verified return path
    assert verify_dkim(received.data, dns_txt(api, tenant))
    assert b"d=" + tenant.domain.encode() in received.data.replace(b"\r\n", b"")
    tampered = received.data.replace(b"Hello", b"Hellp", 1)
    assert not verify_dkim(tampered, dns_txt(api, tenant))

    raw = Api.data(api.get(f"{SERVER}/messages/{recipient['id']}/raw", server_key=tenant.api_key))
    assert raw["signed"] is True
    assert base64.b64decode(raw["raw_base64"]).rstrip(b"\r\n") == received.data.rstrip(b"\r\n")

    [attempt] = Api.data(api.get(f"{SERVER}/messages/{recipient['id']}/deliveries",
                                 server_key=tenant.api_key))["deliveries"]
    assert attempt["status"] == "Sent" and attempt["code"] == 250
    assert attempt["host"] == mx.relay and "queued" in attempt["output"]
    assert attempt["tls"] is False and attempt["duration_ms"] >= 0 and attempt["timestamp"]


def test_starttls_used_when_offered(api, tenant, monkeypatch, stack):
    server = ScriptedMX(tls=True).start()
    try:
        monkeypatch.setenv("DELIVERY_RELAY", server.relay)
        to = rcpt("tls")
        [r] = sent_ok(api, tenant, to=[to])["recipients"]
        wait_status(api, tenant, r["id"], "Sent")
        [attempt] = message(api, tenant, r["id"])["deliveries"]
        assert attempt["tls"] is True
        assert len(server.received_for(to)) == 1
    finally:
        server.stop()


def test_deferred_twice_then_accepted(api, tenant, mx):
    mx.script = ["451 4.7.1 greylisted, try later", "452 4.2.2 mailbox busy", "250"]
    to = rcpt("defer")
    [r] = sent_ok(api, tenant, to=[to])["recipients"]
    shown = wait_status(api, tenant, r["id"], "Sent")
    assert [d["status"] for d in shown["deliveries"]] == ["SoftFail", "SoftFail", "Sent"]
    assert [d["code"] for d in shown["deliveries"]] == [451, 452, 250]
    assert [e["event"] for e in shown["events"]] == ["MessageDelayed", "MessageDelayed",
                                                     "MessageSent"]
    assert "greylisted" in shown["events"][0]["details"]
    assert shown["attempts"] == 3 and len(mx.received_for(to)) == 1


def test_hard_rejection_fails_and_suppresses(api, tenant, mx):
    mx.script = ["rcpt:550 5.1.1 no such user"]
    to = rcpt("gone")
    [r] = sent_ok(api, tenant, to=[to])["recipients"]
    shown = wait_status(api, tenant, r["id"], "HardFail")
    assert [e["event"] for e in shown["events"]] == ["MessageDeliveryFailed"]
    assert shown["deliveries"][0]["code"] == 550 and "no such user" in shown["status_details"]
    listed = Api.data(api.get(f"{tenant.server_path}/suppressions"))["suppressions"]
    [entry] = [s for s in listed if s["address"] == to.lower()]
    assert entry["source"] == "hard_fail" and entry["expires_at"]
    # The next message to that address is held, never sent.
    [again] = sent_ok(api, tenant, to=[to])["recipients"]
    assert again["status"] == "Held"
    assert not mx.received_for(to)


def test_data_rejection_5xx_is_hard(api, tenant, mx):
    mx.script = ["554 5.7.1 message refused"]
    [r] = sent_ok(api, tenant)["recipients"]
    shown = wait_status(api, tenant, r["id"], "HardFail")
    assert shown["deliveries"][0]["stage"] == "data" and shown["deliveries"][0]["code"] == 554


def test_suppressed_recipient_is_held_and_never_contacted(api, tenant, mx):
    held = rcpt("held")
    created = Api.data(api.post(f"{tenant.server_path}/suppressions",
                                {"address": held.upper(), "reason": "asked us to stop"}), 201)
    assert created["suppression"]["address"] == held.lower()
    other = rcpt("other")
    result = sent_ok(api, tenant, to=[held], cc=[other])
    by_rcpt = {r["rcpt_to"]: r for r in result["recipients"]}
    assert by_rcpt[held]["status"] == "Held" and by_rcpt[other]["status"] == "Pending"
    wait_status(api, tenant, by_rcpt[other]["id"], "Sent")   # the pipeline has run
    shown = message(api, tenant, by_rcpt[held]["id"])
    assert shown["status"] == "Held" and shown["deliveries"] == []
    assert [e["event"] for e in shown["events"]] == ["MessageHeld"]
    assert held not in mx.rcpts_seen and other in mx.rcpts_seen

    # Removing the suppression lets later mail through.
    Api.data(api.delete(f"{tenant.server_path}/suppressions/{held}"))
    Api.error(api.delete(f"{tenant.server_path}/suppressions/{held}"), 404, "NotFound")
    [r] = sent_ok(api, tenant, to=[held])["recipients"]
    wait_status(api, tenant, r["id"], "Sent")


def test_dropped_connection_mid_data_is_retried_and_delivered_once(api, tenant, mx):
    mx.script = ["drop"]
    to = rcpt("drop")
    [r] = sent_ok(api, tenant, to=[to])["recipients"]
    shown = wait_status(api, tenant, r["id"], "Sent")
    assert [d["status"] for d in shown["deliveries"]] == ["SoftFail", "Sent"]
    assert shown["deliveries"][0]["stage"] == "data"
    assert mx.drops == 1 and len(mx.received_for(to)) == 1


def test_one_message_per_recipient_and_bcc_stays_hidden(api, tenant, mx):
    to, cc, bcc = rcpt("to"), rcpt("cc"), rcpt("bcc")
    result = sent_ok(api, tenant, to=[to, to.upper()], cc=[cc], bcc=[bcc])
    recipients = result["recipients"]
    assert [r["rcpt_to"] for r in recipients] == [to, cc, bcc]
    assert len({r["id"] for r in recipients}) == 3 and len({r["token"] for r in recipients}) == 3
    for r in recipients:
        wait_status(api, tenant, r["id"], "Sent")
    copies = [mx.received_for(a)[0].data for a in (to, cc, bcc)]
    assert all(bcc.encode() not in data for data in copies)
    assert all(cc.encode() in data for data in copies)


def test_unverified_or_foreign_from_domain_is_refused(api, stack):
    tenant = make_tenant(api, verified=False)
    error = Api.error(send(api, tenant), 422, "ValidationError")
    assert error["field"] == "from" and tenant.domain in error["message"]
    error = Api.error(send(api, tenant, **{"from": "someone@gmail.com"}), 422, "ValidationError")
    assert error["field"] == "from"


def test_suspended_server_cannot_send(api, tenant):
    Api.data(api.post(f"{tenant.server_path}/suspend", {"reason": "abuse"}))
    error = Api.error(send(api, tenant), 403, "ServerSuspended")
    assert "suspended" in error["message"]
    Api.data(api.post(f"{tenant.server_path}/unsuspend"))
    sent_ok(api, tenant)


@pytest.mark.parametrize("fields, field", [
    ({"subject": "Hi\r\nBcc: victim@evil.example"}, "subject"),
    ({"subject": "Hi\nX-Injected: 1"}, "subject"),
    ({"headers": {"X-Ok": "a\r\nBcc: victim@evil.example"}}, "headers.X-Ok"),
    ({"headers": {"X-Bad\r\nBcc": "x"}}, None),
    ({"headers": {"Bcc": "victim@evil.example"}}, "headers.Bcc"),
    ({"headers": {"DKIM-Signature": "v=1"}}, "headers.DKIM-Signature"),
    ({"headers": {"message-id": "<x@y>"}}, "headers.message-id"),
    ({"to": ["a@example.com\r\nRCPT TO:<victim@evil.example>"]}, "to[0]"),
    ({"to": [{"email": "a@example.com", "name": "A\r\nBcc: victim@evil.example"}]}, "to[0].name"),
    ({"from": {"email": "app@DOMAIN", "name": "x\nBcc: v@evil.example"}}, "from.name"),
    ({"to": ["not-an-address"]}, "to[0]"),
    ({"to": []}, "to"),
    ({"attachments": [{"name": "a.txt", "content_type": "text/plain",
                       "data_base64": "@@not base64@@"}]}, "attachments[0].data_base64"),
    ({"stream": "no-such-stream"}, "stream"),
    ({"text_body": None}, "text_body"),
])
def test_injection_and_invalid_input_refused(api, tenant, fields, field):
    if "from" in fields:
        fields["from"]["email"] = fields["from"]["email"].replace("DOMAIN", tenant.domain)
    error = Api.error(send(api, tenant, **fields), 422, "ValidationError")
    if field:
        assert error["field"] == field, error
    assert Api.data(api.get(f"{SERVER}/messages?per_page=1", server_key=tenant.api_key)
                    )["pagination"]["total"] == 0


def test_missing_fields_and_size_limit(api, tenant, monkeypatch):
    error = Api.error(api.post(f"{SERVER}/messages", {"from": f"a@{tenant.domain}"},
                               server_key=tenant.api_key), 400, "ParameterMissing")
    assert error["field"] == "to"
    monkeypatch.setenv("SMTP_SERVER_MAX_MESSAGE_SIZE", "2KB")
    big = base64.b64encode(b"x" * 4096).decode()
    error = Api.error(send(api, tenant, attachments=[{"name": "big.bin", "content_type":
                      "application/octet-stream", "data_base64": big}]), 422, "ValidationError")
    assert error["field"].startswith("attachments") and "max_message_size" in error["message"]
    Api.error(send(api, tenant, text_body="y" * 3000), 422, "ValidationError")


def test_batch_gives_one_result_per_entry(api, tenant, mx):
    good = {"from": f"app@{tenant.domain}", "to": [rcpt("b1")], "text_body": "one"}
    entries = [
        good,
        {"from": f"app@{tenant.domain}", "to": ["broken"], "text_body": "x"},
        {"from": "app@unverified.example", "to": [rcpt()], "text_body": "x"},
        {"from": f"app@{tenant.domain}", "to": [rcpt()], "subject": "a\r\nb", "text_body": "x"},
        {"to": [rcpt()], "text_body": "x"},
        "not an object",
        {**good, "to": [rcpt("b2")], "tag": "second"},
    ]
    data = Api.data(api.post(f"{SERVER}/messages/batch", {"messages": entries},
                             server_key=tenant.api_key), 200)
    results = data["messages"]
    assert [r["status"] for r in results] == ["success", "error", "error", "error", "error",
                                              "error", "success"]
    assert [r["index"] for r in results] == list(range(7))
    assert results[1]["error"]["field"] == "to[0]"
    assert results[2]["error"]["field"] == "from"
    assert results[3]["error"]["field"] == "subject"
    assert results[4]["error"]["code"] == "ParameterMissing"
    assert data["accepted"] == 2 and data["failed"] == 5
    for r in (results[0], results[6]):
        wait_status(api, tenant, r["data"]["recipients"][0]["id"], "Sent")
    Api.error(api.post(f"{SERVER}/messages/batch", {"messages": [good] * 501},
                       server_key=tenant.api_key), 422, "ValidationError")


def test_batch_answers_name_each_entrys_own_rows(api, tenant, mx):
    """Every entry's answer names the rows written for it (its submission, one message per
    recipient), however the database returns the inserted rows' ids; entries alike in all
    but their recipients included. (51 entries of 2 recipients: past store.MAX_ROWS, so
    PostgreSQL too writes them with multi-row INSERTs.)"""
    entries = [{"from": f"app@{tenant.domain}", "to": [rcpt(f"e{i}a"), rcpt(f"e{i}b")],
                "subject": f"Entry {i}" if i % 3 else "Alike", "text_body": "Same body"}
               for i in range(51)]
    data = Api.data(api.post(f"{SERVER}/messages/batch", {"messages": entries},
                             server_key=tenant.api_key), 200)
    assert data["accepted"] == 51
    submissions = set()
    for entry, result in zip(entries, data["messages"]):
        answer = result["data"]
        submissions.add(answer["message_id"])
        assert [r["rcpt_to"] for r in answer["recipients"]] == entry["to"]
        for recipient in answer["recipients"]:
            row = message(api, tenant, recipient["id"])
            assert row["rcpt_to"] == recipient["rcpt_to"] and row["token"] == recipient["token"]
            assert row["subject"] == entry["subject"]
            assert row["submission_id"] == answer["message_id"]
    assert len(submissions) == 51


def test_batch_as_a_bare_array_answers_as_the_object_form(api, tenant, mx):
    """A bare JSON array of SendRequests (as camelmailer's send_batch posts it) is the same
    request as {"messages": [...]}, with the same answer and limits."""
    def entries(tag):
        return [{"from": f"app@{tenant.domain}", "to": [f"{tag}-1@example.net"],
                 "text_body": "one"},
                {"from": f"app@{tenant.domain}", "to": ["broken"], "text_body": "x"},
                {"to": [rcpt()], "text_body": "x"}]

    as_object = Api.data(api.post(f"{SERVER}/messages/batch", {"messages": entries("obj")},
                                  server_key=tenant.api_key), 200)
    as_array = Api.data(api.post(f"{SERVER}/messages/batch", entries("arr"),
                                 server_key=tenant.api_key), 200)
    assert set(as_array) == set(as_object) == {"messages", "accepted", "failed"}
    assert (as_array["accepted"], as_array["failed"]) == (as_object["accepted"],
                                                          as_object["failed"]) == (1, 2)
    assert [r["error"] for r in as_array["messages"][1:]] == \
        [r["error"] for r in as_object["messages"][1:]]
    sent = as_array["messages"][0]["data"]["recipients"][0]
    assert sent["rcpt_to"] == "arr-1@example.net"
    wait_status(api, tenant, sent["id"], "Sent")
    for body, code, status in (([], "ValidationError", 422),
                               ([entries("x")[0]] * 501, "ValidationError", 422),
                               ([[1, 2]], None, 200), ("just a string", "ValidationError", 422)):
        response = api.post(f"{SERVER}/messages/batch", body, server_key=tenant.api_key)
        if code:
            Api.error(response, status, code)
        else:  # a nested array is an entry that is not an object: it fails alone
            assert Api.data(response, 200)["messages"][0]["status"] == "error"
    # Only the batch routes read an array.
    Api.error(api.post(f"{SERVER}/messages", entries("y"), server_key=tenant.api_key), 422,
              "ValidationError")


def test_listing_filters_and_pagination(api, tenant, mx):
    marker = unique("needle")
    ids = []
    for i in range(3):
        result = sent_ok(api, tenant, subject=f"{marker} {i}", tag="even" if i % 2 == 0 else "odd")
        ids.append(result["recipients"][0]["id"])
    for message_id in ids:
        wait_status(api, tenant, message_id, "Sent")
    key = tenant.api_key

    def listing(query: str) -> dict:
        return Api.data(api.get(f"{SERVER}/messages?{query}", server_key=key))

    page = listing("per_page=2&page=1")
    assert [m["id"] for m in page["messages"]] == ids[::-1][:2]
    assert page["pagination"] == {"page": 1, "per_page": 2, "total": 3, "total_pages": 2}
    assert [m["id"] for m in listing("per_page=2&page=2")["messages"]] == [ids[0]]
    assert {m["id"] for m in listing("tag=even")["messages"]} == {ids[0], ids[2]}
    assert {m["id"] for m in listing(f"query={marker}%201")["messages"]} == {ids[1]}
    assert len(listing("status=Sent&scope=outgoing&stream=outbound")["messages"]) == 3
    assert listing("status=HardFail")["messages"] == []
    assert listing("stream=nope")["messages"] == []
    for bad in ("status=Delivering", "scope=sideways", "per_page=101", "page=0"):
        Api.error(api.get(f"{SERVER}/messages?{bad}", server_key=key), 422, "ValidationError")


def test_other_servers_messages_are_not_found(api, tenant, mx):
    [r] = sent_ok(api, tenant)["recipients"]
    other = make_tenant(api)
    for suffix in ("", "/deliveries", "/raw"):
        Api.error(api.get(f"{SERVER}/messages/{r['id']}{suffix}", server_key=other.api_key),
                  404, "NotFound")
        Api.data(api.get(f"{SERVER}/messages/{r['id']}{suffix}", server_key=tenant.api_key))
    Api.error(api.get(f"{SERVER}/messages/99999999", server_key=tenant.api_key), 404, "NotFound")
    Api.error(api.get(f"{SERVER}/messages/abc", server_key=tenant.api_key), 404, "NotFound")
    Api.error(api.get(f"{SERVER}/messages", server_key="wrong"), 401, "Unauthorized")
