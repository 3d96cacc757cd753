"""A real third-party client against the local stack: the `camelmailer` SDK from PyPI
(0.2.2, a test dependency), unchanged, over real sockets. Every messaging call it has that we
serve — send, batches, templates, streams, stats, bounces, inbound, message reads — and its
error mapping. A change that breaks a real client fails here."""
from __future__ import annotations

import asyncio
import email
from email import policy

import camelmailer
import pytest
from camelmailer import (AuthenticationError, CamelMailerError, NotFoundError, RateLimitError,
                         ValidationError)

from chalicelib.api import framework
from tests.support import Api, wait_for


@pytest.fixture
def client(stack, tenant):
    with camelmailer.CamelMailer(api_key=tenant.api_key, base_url=stack.base_url) as sdk:
        yield sdk


def test_send_read_and_list_messages(client, tenant, mx):
    checked = framework.response_check.checked
    assert client.ping()["pong"] is True
    assert client.server()["server"]["organization"] == tenant.org

    result = client.emails.send({"from": f"App <app@{tenant.domain}>",
                                 "to": ["sdk-one@example.net"], "subject": "From the SDK",
                                 "text_body": "Hello", "html_body": "<p>Hello</p>",
                                 "tag": "sdk", "metadata": {"order": 7}})
    (recipient,) = result["recipients"]
    assert recipient["rcpt_to"] == "sdk-one@example.net" and recipient["status"] == "Pending"
    message_id = recipient["id"]

    wait_for(lambda: client.emails.get(message_id)["message"]["status"] == "Sent", 20,
             message="the SDK's message sent")
    shown = client.emails.get(message_id)["message"]
    assert (shown["tag"], shown["metadata"], shown["subject"]) == ("sdk", {"order": 7},
                                                                   "From the SDK")
    assert [e["event"] for e in shown["events"]] == ["MessageSent"]
    assert client.emails.deliveries(message_id)["deliveries"][0]["status"] == "Sent"
    raw = client.emails.raw(message_id)
    assert raw["signed"] is True and "Subject: From the SDK" in raw["raw"]
    assert client.emails.opens(message_id)["opens"] == []
    assert client.emails.clicks(message_id)["clicks_count"] == 0

    listed = client.emails.list(tag="sdk", per_page=10)
    assert [m["id"] for m in listed["messages"]] == [message_id]
    assert listed["pagination"]["total"] == 1
    assert client.emails.list(query="no such subject anywhere")["messages"] == []
    assert mx.received_for("sdk-one@example.net")
    # Each answer above went through the stack's response-schema check.
    assert framework.response_check.checked >= checked + 10


def test_both_batch_calls_post_bare_arrays_and_work_unchanged(client, tenant, mx):
    sender = f"app@{tenant.domain}"
    batch = client.emails.send_batch([
        {"from": sender, "to": ["sdk-b1@example.net"], "subject": "One", "text_body": "1"},
        {"from": sender, "to": ["not an address"], "text_body": "x"},
        {"from": sender, "to": ["sdk-b2@example.net"], "subject": "Two", "text_body": "2"},
    ])
    assert (batch["accepted"], batch["failed"]) == (2, 1)
    assert [m["status"] for m in batch["messages"]] == ["success", "error", "success"]
    assert batch["messages"][1]["error"]["code"] == "ValidationError"

    template = client.templates.create({"name": "SDK welcome", "subject": "Welcome {{ name }}",
                                        "html_body": "<p>Hi {{ name }}</p>",
                                        "text_body": "Hi {{ name }}"})["template"]
    permalink = template["permalink"]
    templated = client.emails.send_with_template_batch([
        {"template": permalink, "from": sender, "to": ["sdk-t1@example.net"],
         "template_model": {"name": "Ann"}},
        {"template": permalink, "from": sender, "to": ["sdk-t2@example.net"],
         "template_model": {"name": "<Bob>"}},
        {"template": "missing-template", "from": sender, "to": ["sdk-t3@example.net"]},
    ])
    assert templated["template"] == permalink  # the one template used (the other is unknown)
    assert [m["status"] for m in templated["messages"]] == ["success", "success", "error"]
    assert templated["messages"][2]["error"]["code"] == "NotFound"

    one = client.emails.send_with_template({"template": permalink, "from": sender,
                                            "to": ["sdk-t4@example.net"],
                                            "template_model": {"name": "Cy"}})
    assert one["recipients"][0]["rcpt_to"] == "sdk-t4@example.net"

    for address in ("sdk-b1", "sdk-b2", "sdk-t1", "sdk-t2", "sdk-t4"):
        wait_for(lambda a=address: mx.received_for(f"{a}@example.net"), 20,
                 message=f"delivery to {address}")
    bob = email.message_from_bytes(mx.received_for("sdk-t2@example.net")[0].data,
                                   policy=policy.default)
    # Templates escape HTML in html_body only; the subject and text are plain text.
    assert str(bob["Subject"]) == "Welcome <Bob>"
    assert "Hi &lt;Bob&gt;" in bob.get_body(("html",)).get_content()
    assert bob.get_body(("plain",)).get_content().strip() == "Hi <Bob>"


def test_templates_streams_stats_bounces_and_inbound(client, tenant):
    created = client.templates.create({"name": "Receipt", "subject": "Receipt {{ n }}",
                                       "text_body": "Total {{ total }}"})["template"]
    permalink = created["permalink"]
    assert permalink in [t["permalink"] for t in client.templates.list()["templates"]]
    assert client.templates.get(permalink)["template"]["text_body"] == "Total {{ total }}"
    updated = client.templates.update(permalink, {"subject": "Your receipt {{ n }}"})
    assert updated["template"]["subject"] == "Your receipt {{ n }}"
    rendered = client.templates.render(permalink, {"n": 5, "total": "9.99"})
    assert rendered == {"subject": "Your receipt 5", "html_body": None,
                        "text_body": "Total 9.99"}
    assert client.templates.archive(permalink)["template"]["archived"] is True

    stream = client.streams.create({"name": "SDK news", "stream_type": "broadcast"})["stream"]
    assert stream["stream_type"] == "broadcast"
    names = [s["permalink"] for s in client.streams.list()["streams"]]
    assert "outbound" in names and stream["permalink"] in names
    assert client.streams.update(stream["permalink"], {"name": "SDK digest"})["stream"][
        "name"] == "SDK digest"
    assert client.streams.get(stream["permalink"])["stream"]["name"] == "SDK digest"
    assert client.streams.archive(stream["permalink"])["stream"]["archived"] is True

    stats = client.stats.get(from_="2020-01-01T00:00:00Z")  # the SDK unwraps data.stats
    assert {"messages", "by_status", "opens", "clicks", "streams", "tags"} <= set(stats)
    deliveries = client.stats.deliveries()["stats"]
    assert set(deliveries["totals"]) == {"sent", "delayed", "failed", "held"}

    assert client.bounces.list(per_page=5)["bounces"] == []
    assert client.inbound.list(status="Held")["messages"] == []


def test_errors_map_to_the_sdk_exception_types(client, stack, tenant, api, monkeypatch):
    with pytest.raises(NotFoundError) as missing:
        client.emails.get(999_999_999)
    assert (missing.value.code, missing.value.status_code) == ("NotFound", 404)

    with pytest.raises(ValidationError) as invalid:
        client.emails.send({"from": "someone@unverified.example", "to": ["x@example.net"],
                            "text_body": "x"})
    assert (invalid.value.code, invalid.value.status_code) == ("ValidationError", 422)
    assert "from" in invalid.value.message

    with pytest.raises(ValidationError) as absent:
        client.emails.send({"to": ["x@example.net"], "text_body": "x"})
    assert (absent.value.code, absent.value.status_code) == ("ParameterMissing", 400)

    with pytest.raises(NotFoundError):
        client.templates.get("no-such-template")
    with pytest.raises(ValidationError):
        client.emails.send_batch([])
    with pytest.raises(NotFoundError):
        client.emails.send_with_template({"template": "no-such-template",
                                          "from": f"a@{tenant.domain}", "to": ["x@example.net"]})

    with camelmailer.CamelMailer(api_key="not-a-key", base_url=stack.base_url) as stranger:
        with pytest.raises(AuthenticationError) as unauthorized:
            stranger.ping()
    assert (unauthorized.value.code, unauthorized.value.status_code) == ("Unauthorized", 401)

    monkeypatch.setenv("API_RATE_LIMIT_PER_SECOND", "0.01")
    monkeypatch.setenv("API_RATE_LIMIT_BURST", "1")
    client.streams.list()
    with pytest.raises(RateLimitError) as limited:
        client.streams.list()
    assert (limited.value.code, limited.value.status_code) == ("RateLimited", 429)
    monkeypatch.delenv("API_RATE_LIMIT_PER_SECOND")

    Api.data(api.post(tenant.server_path + "/suspend", {"reason": "SDK test"}))
    with pytest.raises(CamelMailerError) as suspended:
        client.emails.send({"from": f"a@{tenant.domain}", "to": ["x@example.net"],
                            "text_body": "x"})
    assert suspended.value.status_code == 403 and suspended.value.code == "ServerSuspended"


def test_the_async_client_too(stack, tenant):
    async def run():
        async with camelmailer.AsyncCamelMailer(api_key=tenant.api_key,
                                                base_url=stack.base_url) as sdk:
            pong = await sdk.ping()
            batch = await sdk.emails.send_batch([{"from": f"app@{tenant.domain}",
                                                  "to": ["sdk-async@example.net"],
                                                  "text_body": "async"}])
            return pong, batch

    # In a thread of its own: the browser tests' Playwright may keep an event loop running in
    # this one, and asyncio.run() refuses to nest.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pong, batch = pool.submit(asyncio.run, run()).result()
    assert pong["pong"] is True and batch["accepted"] == 1
