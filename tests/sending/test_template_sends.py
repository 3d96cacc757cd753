"""Template sends through real HTTP, delivered to a loopback MX: rendering, overrides, streams,
404s for unknown and archived templates, and per-entry batch results."""
from __future__ import annotations

import email
from email import policy

import pytest

from chalicelib.db.models import Message
from tests.mx import ScriptedMX
from tests.support import Api, all_tenants, wait_for

S = "/api/v2/server"

ORDER = {
    "name": "Order",
    "subject": "Order {{ order.id }} for {{ name }}",
    "html_body": "<p>Hello {{ name }}</p><ul>{{#lines}}<li>{{ sku }} x{{ qty }}</li>{{/lines}}"
                 "</ul>",
    "text_body": "Hello {{ name }}\n{{#lines}}- {{ sku }} x{{ qty }}\n{{/lines}}",
}
MODEL = {"name": "<Ann>", "order": {"id": 42},
         "lines": [{"sku": "A1", "qty": 2}, {"sku": "B2", "qty": 1}]}


@pytest.fixture
def mx(monkeypatch):
    server = ScriptedMX().start()
    monkeypatch.setenv("DELIVERY_RELAY", server.relay)
    yield server
    server.stop()


@pytest.fixture
def order(api, tenant):
    return Api.data(api.post(S + "/templates", ORDER, server_key=tenant.api_key),
                    201)["template"]


def _parts(data: bytes) -> tuple[str, str | None, str | None]:
    """(Subject, HTML body, text body) of a received message, transfer encodings undone."""
    msg = email.message_from_bytes(data, policy=policy.default)
    html = msg.get_body(("html",))
    text = msg.get_body(("plain",))
    return (str(msg["Subject"]), html.get_content() if html else None,
            text.get_content() if text else None)


def _send(api, tenant, body, status=201):
    return api.post(S + "/messages/with_template",
                    {"from": f"shop@{tenant.domain}", **body}, server_key=tenant.api_key)


def test_template_send_arrives_rendered_at_the_mx(api, tenant, order, mx):
    result = Api.data(_send(api, tenant, {"to": ["ann@example.net"], "template": "order",
                                          "template_model": MODEL, "tag": "orders"}), 201)
    assert result["message_id"] and result["recipients"][0]["rcpt_to"] == "ann@example.net"
    received = wait_for(lambda: mx.received_for("ann@example.net"), 20, message="delivery")
    subject, html, text = _parts(received[0].data)
    assert subject == "Order 42 for <Ann>"  # subject is plain text, not HTML-escaped
    assert "<p>Hello &lt;Ann&gt;</p><ul><li>A1 x2</li><li>B2 x1</li></ul>" in html
    assert "<Ann>" not in html
    assert text.replace("\r\n", "\n").startswith("Hello <Ann>\n- A1 x2\n- B2 x1\n")

    shown = Api.data(api.get(S + f"/messages/{result['recipients'][0]['id']}",
                             server_key=tenant.api_key))["message"]
    assert shown["subject"] == "Order 42 for <Ann>" and shown["tag"] == "orders"


def test_direct_fields_override_rendered_ones(api, tenant, order, mx):
    result = Api.data(_send(api, tenant, {"to": ["bob@example.net"], "template": "order",
                                          "template_model": MODEL, "subject": "Your receipt",
                                          "text_body": "Plain override"}), 201)
    received = wait_for(lambda: mx.received_for("bob@example.net"), 20, message="delivery")
    subject, html, text = _parts(received[0].data)
    assert subject == "Your receipt" and text.strip() == "Plain override"
    assert "<li>A1 x2</li>" in html  # the part not overridden is still rendered
    assert result["recipients"][0]["rcpt_to"] == "bob@example.net"


def test_unknown_or_archived_template_is_404_and_sends_nothing(api, tenant, order, mx):
    Api.error(_send(api, tenant, {"to": ["x@example.net"], "template": "nope"}), 404, "NotFound")
    Api.data(api.post(S + "/templates/order/archive", server_key=tenant.api_key))
    Api.error(_send(api, tenant, {"to": ["x@example.net"], "template": "order"}), 404,
              "NotFound")
    messages = Api.data(api.get(S + "/messages", server_key=tenant.api_key))["messages"]
    assert messages == []


def test_template_send_input_errors(api, tenant, order):
    err = Api.error(_send(api, tenant, {"to": ["x@example.net"]}), 400, "ParameterMissing")
    assert err["field"] == "template"
    err = Api.error(_send(api, tenant, {"to": ["x@example.net"], "template": "order",
                                        "template_model": "not an object"}),
                    422, "ValidationError")
    assert err["field"] == "template_model"
    err = Api.error(api.post(S + "/messages/with_template",
                             {"from": "a@unverified.example", "to": ["x@example.net"],
                              "template": "order"}, server_key=tenant.api_key),
                    422, "ValidationError")
    assert err["field"] == "from"
    err = Api.error(_send(api, tenant, {"to": ["x@example.net"], "template": "order",
                                        "stream": "missing"}), 422, "ValidationError")
    assert err["field"] == "stream"
    # A model that makes the output explode is refused, not rendered.
    Api.data(api.post(S + "/templates", {"name": "Bomb", "html_body":
                                         "{{#a}}{{#a}}{{#a}}{{#a}}xxxx{{/a}}{{/a}}{{/a}}{{/a}}"},
                      server_key=tenant.api_key), 201)
    err = Api.error(_send(api, tenant, {"to": ["x@example.net"], "template": "bomb",
                                        "template_model": {"a": list(range(100))}}),
                    422, "ValidationError")
    assert err["field"] == "template_model"
    # A model value cannot split the Subject header to inject another one.
    err = Api.error(_send(api, tenant, {"to": ["x@example.net"], "template": "order",
                                        "template_model": {"name": "x\r\nBcc: evil@example.com"}}),
                    422, "ValidationError")
    assert err["field"] == "template_model"
    Api.error(api.post(S + "/messages/with_template",
                       {"from": f"shop@{tenant.domain}", "to": ["x@example.net"],
                        "template": "order"}), 401, "Unauthorized")


def test_template_send_goes_to_the_named_stream(api, tenant, order, mx):
    Api.data(api.post(S + "/streams", {"name": "Promo", "stream_type": "broadcast"},
                      server_key=tenant.api_key), 201)
    result = Api.data(_send(api, tenant, {"to": ["p@example.net"], "template": "order",
                                          "template_model": MODEL, "stream": "promo"}), 201)
    listed = Api.data(api.get(S + "/messages?stream=promo", server_key=tenant.api_key))
    assert [m["id"] for m in listed["messages"]] == [result["recipients"][0]["id"]]
    assert Api.data(api.get(S + "/messages?stream=outbound",
                            server_key=tenant.api_key))["messages"] == []
    Api.data(api.post(S + "/streams/promo/archive", server_key=tenant.api_key))
    err = Api.error(_send(api, tenant, {"to": ["p@example.net"], "template": "order",
                                        "stream": "promo"}), 422, "ValidationError")
    assert err["field"] == "stream" and "archived" in err["message"]


def test_batch_renders_each_model_and_reports_each_entry(api, tenant, order, mx):
    body = {
        "template": "order", "from": f"shop@{tenant.domain}", "tag": "batch",
        "template_model": {"order": {"id": 7}},  # shared, merged under each entry's model
        "messages": [
            {"to": ["one@example.net"], "template_model": {"name": "One"}},
            {"to": ["not an address"], "template_model": {"name": "Bad"}},
            {"to": ["two@example.net"], "template_model": {"name": "Two", "order": {"id": 8}},
             "subject": "Custom {{ not rendered }}"},
            "not an object",
            {"to": ["three@example.net"], "template": "another"},
            {"template_model": {"name": "No recipient"}},
        ],
    }
    answer = Api.data(api.post(S + "/messages/with_template/batch", body,
                               server_key=tenant.api_key), 200)
    results = answer["messages"]
    assert [r["index"] for r in results] == list(range(6))
    assert [r["status"] for r in results] == \
        ["success", "error", "success", "error", "error", "error"]
    assert answer["accepted"] == 2 and answer["failed"] == 4 and answer["template"] == "order"
    assert results[1]["error"]["code"] == "ValidationError" and "to" in results[1]["error"]["field"]
    assert results[4]["error"]["field"] == "template"
    assert results[5]["error"]["code"] == "ParameterMissing"

    one = wait_for(lambda: mx.received_for("one@example.net"), 20, message="delivery one")
    two = wait_for(lambda: mx.received_for("two@example.net"), 20, message="delivery two")
    assert _parts(one[0].data)[0] == "Order 7 for One"
    subject, html, _ = _parts(two[0].data)
    assert subject == "Custom {{ not rendered }}" and "Hello Two" in html
    with all_tenants() as db:
        tags = {m.rcpt_to: m.tag for m in db.query(Message).filter(
            Message.rcpt_to.in_(["one@example.net", "two@example.net"]))}
    assert tags == {"one@example.net": "batch", "two@example.net": "batch"}


def test_batch_limits_and_unknown_template(api, tenant, order):
    key = tenant.api_key
    entry = {"to": ["x@example.net"]}
    Api.error(api.post(S + "/messages/with_template/batch",
                       {"template": "nope", "from": f"shop@{tenant.domain}",
                        "messages": [entry]}, server_key=key), 404, "NotFound")
    err = Api.error(api.post(S + "/messages/with_template/batch",
                             {"template": "order", "messages": [entry] * 501}, server_key=key),
                    422, "ValidationError")
    assert err["field"] == "messages"
    err = Api.error(api.post(S + "/messages/with_template/batch",
                             {"template": "order", "messages": []}, server_key=key),
                    422, "ValidationError")
    assert err["field"] == "messages"
    Api.error(api.post(S + "/messages/with_template/batch", {"messages": [entry]},
                       server_key=key), 400, "ParameterMissing")


def test_batch_shared_fields_are_validated_once(api, tenant, order):
    err = Api.error(api.post(S + "/messages/with_template/batch",
                             {"template": "order", "tag": "t" * 300,
                              "messages": [{"to": ["x@example.net"]}]},
                             server_key=tenant.api_key), 422, "ValidationError")
    assert err["field"] == "tag"
    err = Api.error(api.post(S + "/messages/with_template/batch",
                             {"template": "order", "template_model": [1],
                              "messages": [{"to": ["x@example.net"]}]},
                             server_key=tenant.api_key), 422, "ValidationError")
    assert err["field"] == "template_model"


def _shape(answer: dict) -> dict:
    """A batch answer without the ids and tokens that differ between two sends."""
    return {**answer, "messages": [
        {k: v for k, v in r.items() if k != "data"} |
        ({"recipients": [x["rcpt_to"] for x in r["data"]["recipients"]]} if "data" in r else {})
        for r in answer["messages"]]}


def test_batch_as_a_bare_array_answers_as_the_object_form(api, tenant, order, mx):
    """What third-party SDKs send (camelmailer's send_with_template_batch): a JSON array of
    template sends, each naming its template."""
    other = Api.data(api.post(S + "/templates", {"name": "Other", "subject": "Hi {{ name }}",
                                                 "text_body": "x"},
                              server_key=tenant.api_key), 201)["template"]["permalink"]
    sender = f"shop@{tenant.domain}"
    entries = [{"to": ["arr1@example.net"], "template_model": {"name": "A", "order": {"id": 1}}},
               {"to": ["not an address"], "template_model": {"name": "B"}},
               {"to": ["arr2@example.net"], "template_model": {"name": "C"}}]
    as_object = Api.data(api.post(S + "/messages/with_template/batch",
                                  {"template": "order", "from": sender, "messages": entries},
                                  server_key=tenant.api_key), 200)
    as_array = Api.data(api.post(S + "/messages/with_template/batch",
                                 [{**e, "template": "order", "from": sender} for e in entries],
                                 server_key=tenant.api_key), 200)
    assert _shape(as_array) == _shape(as_object)
    assert as_array["template"] == "order" and as_array["accepted"] == 2
    arrived = wait_for(lambda: mx.received_for("arr1@example.net"), 20, message="delivery")
    assert "Order 1 for A" in {_parts(m.data)[0] for m in arrived}

    # Entries may name different templates; each unknown one fails alone.
    mixed = Api.data(api.post(S + "/messages/with_template/batch", [
        {"template": "order", "from": sender, "to": ["m1@example.net"]},
        {"template": other, "from": sender, "to": ["m2@example.net"],
         "template_model": {"name": "Zed"}},
        {"template": "no-such-template", "from": sender, "to": ["m3@example.net"]},
        {"from": sender, "to": ["m4@example.net"]},
    ], server_key=tenant.api_key), 200)
    assert [r["status"] for r in mixed["messages"]] == ["success", "success", "error", "error"]
    assert mixed["messages"][2]["error"]["code"] == "NotFound"
    assert mixed["messages"][3]["error"] == {"code": "ParameterMissing", "field": "template",
                                             "message": mixed["messages"][3]["error"]["message"]}
    assert mixed["template"] is None and (mixed["accepted"], mixed["failed"]) == (2, 2)
    m2 = wait_for(lambda: mx.received_for("m2@example.net"), 20, message="delivery m2")
    assert _parts(m2[0].data)[0] == "Hi Zed"

    # The array form has the object form's limits; no entry names a template: 400.
    err = Api.error(api.post(S + "/messages/with_template/batch", [],
                             server_key=tenant.api_key), 422, "ValidationError")
    assert err["field"] == "messages"
    Api.error(api.post(S + "/messages/with_template/batch",
                       [{"template": "order", "to": ["x@example.net"]}] * 501,
                       server_key=tenant.api_key), 422, "ValidationError")
    err = Api.error(api.post(S + "/messages/with_template/batch", [{"to": ["x@example.net"]}],
                             server_key=tenant.api_key), 400, "ParameterMissing")
    assert err["field"] == "template"
    # Only the two batch routes read an array.
    Api.error(api.post(S + "/messages/with_template", [{"template": "order"}],
                       server_key=tenant.api_key), 422, "ValidationError")
