"""A message's ``size`` is the size of its raw source as GET .../raw shows it: the stored
submission until the first attempt prepares the bytes to send (DKIM signature, tracking,
List-Unsubscribe and other headers added), then those bytes, exactly as the MX received
them. It used to stay the submission's size (282 bytes beside a raw source of 1,202)."""
from __future__ import annotations

import base64

from tests.support.sending import SERVER, message, rcpt, sent_ok, wait_status
from tests.support import Api


def _raw(api, tenant, message_id: int) -> dict:
    return Api.data(api.get(f"{SERVER}/messages/{message_id}/raw", server_key=tenant.api_key))


def test_a_sent_messages_size_is_that_of_the_bytes_sent(api, tenant, mx):
    to = rcpt("size")
    result = sent_ok(api, tenant, to=[to], html_body="<p>Hello <a href='https://example.org/'>x</a></p>")
    message_id = result["recipients"][0]["id"]
    shown = wait_status(api, tenant, message_id, "Sent")
    raw = _raw(api, tenant, message_id)
    [received] = mx.received_for(to)
    assert raw["signed"] is True
    assert shown["size"] == raw["size"] == len(base64.b64decode(raw["raw_base64"]))
    assert abs(shown["size"] - len(received.data)) <= 2  # the MX may drop the final CRLF
    listed = Api.data(api.get(f"{SERVER}/messages?query={to}", server_key=tenant.api_key))
    assert [m["size"] for m in listed["messages"]] == [raw["size"]]


def test_the_size_is_set_by_the_first_attempt_and_kept_by_the_next(api, tenant, mx):
    mx.script = ["451 4.3.0 try again later"]  # refused at DATA, then accepted
    result = sent_ok(api, tenant, to=[rcpt("later")])
    message_id = result["recipients"][0]["id"]
    shown = wait_status(api, tenant, message_id, "Sent")
    assert len(shown["deliveries"]) == 2
    raw = _raw(api, tenant, message_id)
    assert raw["signed"] is True and shown["size"] == raw["size"]


def test_a_refused_recipients_size_is_that_of_the_bytes_prepared(api, tenant, mx):
    mx.script = ["rcpt:550 5.1.1 no such user"]  # refused before DATA: bytes kept with the outcome
    result = sent_ok(api, tenant, to=[rcpt("gone")])
    message_id = result["recipients"][0]["id"]
    shown = wait_status(api, tenant, message_id, "HardFail")
    raw = _raw(api, tenant, message_id)
    assert raw["signed"] is True and shown["size"] == raw["size"]


def test_a_held_messages_size_is_that_of_its_stored_source(api, tenant):
    to = rcpt("held")
    Api.data(api.post(f"{tenant.server_path}/suppressions", {"address": to}), 201)
    result = sent_ok(api, tenant, to=[to])
    message_id = result["recipients"][0]["id"]
    shown = message(api, tenant, message_id)
    assert shown["status"] == "Held"
    raw = _raw(api, tenant, message_id)
    assert raw["signed"] is False and shown["size"] == raw["size"]
