"""Typed answers: every endpoint declares the shape of its ``data``, the OpenAPI document
describes it (never a bare object), the record builders are held to the shapes, and the
response check of the test stack rejects a field the schema lacks."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from chalicelib import response_shapes
from chalicelib.api import framework, openapi
from chalicelib.response_shapes import management, messaging, stats


@pytest.fixture(scope="module")
def document():
    import app  # noqa: F401  (registers every blueprint)

    return openapi.generate()


@pytest.fixture(scope="module")
def checker(document):
    from tests.response_check import ResponseChecker

    return ResponseChecker()


def _info(path: str, method: str) -> framework.EndpointInfo:
    for full, info in openapi.route_table():
        if full == path and info.method == method:
            return info
    raise LookupError(path)


def _untyped(schema, components, seen=()) -> list[str]:
    """Places where the schema says only "an object" (what a generated client cannot type)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return [] if name in seen else _untyped(components[name], components, (*seen, name))
    found = []
    if schema.get("type") == "object" and "properties" not in schema and \
            "additionalProperties" not in schema:
        found.append(str(seen[-1] if seen else schema))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            found += _untyped(sub, components, seen)
    for sub in (schema.get("properties") or {}).values():
        found += _untyped(sub, components, seen)
    if isinstance(schema.get("items"), dict):
        found += _untyped(schema["items"], components, seen)
    return found


def test_every_enveloped_answer_has_a_typed_data_schema(document):
    components = document["components"]["schemas"]
    typed = 0
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if not status.startswith("2"):
                    continue
                schema = response["content"]["application/json"]["schema"]
                if path == "/health":
                    continue
                data = schema["properties"]["data"]
                assert data.get("$ref"), (method, path)
                model = components[data["$ref"].rsplit("/", 1)[-1]]
                assert model["additionalProperties"] is False and model["properties"], \
                    (method, path)
                assert not _untyped(data, components), (method, path)
                typed += 1
    assert typed >= 110


def test_an_endpoint_without_a_response_shape_is_refused(document):
    info = _info("/api/v2/server/messages", "POST")
    bare = framework.EndpointInfo(**{**info.__dict__, "response": None})
    with pytest.raises(TypeError, match="declares no response shape"):
        openapi._responses("/api/v2/server/messages", bare, {})


def test_builders_are_held_to_their_shapes():
    @response_shapes.builds(management.Organization)
    def sloppy(extra: dict) -> dict:
        return {"id": 1, "uuid": "u", "name": "n", "permalink": "p", "time_zone": "UTC",
                "created_at": None, "updated_at": None, **extra}

    assert sloppy({})["id"] == 1
    with pytest.raises(TypeError, match=r"not in the shape \['secret'\]"):
        sloppy({"secret": "x"})
    with pytest.raises(TypeError, match=r"required fields missing \['id'\]"):
        response_shapes.check(messaging.Recipient, {"rcpt_to": "a@b", "token": "t", "status": "Pending"})
    # Optional fields (shown only in some answers) may be absent or present.
    key = {"id": 1, "uuid": "u", "name": "n", "key_hint": "abcd", "seeded": False,
           "last_used_at": None, "revoked_at": None, "created_at": None}
    assert response_shapes.check(management.AdminApiKey, key) and \
        response_shapes.check(management.AdminApiKey, {**key, "key": "secret"})
    # Keys as JSON spells them: Stats' "from" (from_ in Python).
    assert "from" in response_shapes.keys(stats.Stats)[1]


def test_real_builders_return_their_shape():
    from chalicelib.api.response_builders import messaging as message_records

    event = SimpleNamespace(event="MessageSent", uuid="u-1", details="250 OK",
                            created_at=None)
    assert set(message_records.event(event)) == set(messaging.Event.__annotations__)
    assert message_records.event.shape is messaging.Event


def _message_answer() -> dict:
    message = {"id": 1, "token": "t", "scope": "outgoing", "status": "Sent",
               "status_details": None, "bounce_category": None, "bounce_reason": None, "rcpt_to": "a@example.net", "mail_from": "b@example.com",
               "subject": "Hi", "message_id": "<x@y>", "submission_id": 1,
               **dict.fromkeys(messaging.KEPT_SEND_FIELDS),  # the send request's, all optional
               "metadata": {"k": 1}, "stream": "outbound", "bounce": False, "held": False,
               "return_path": "rp.example.com",
               "size": 10, "attempts": 1, "next_attempt_at": None,
               "last_attempt_at": "2026-01-01T00:00:00Z", "sent_at": "2026-01-01T00:00:00Z",
               "track_opens": True, "track_clicks": False, "opens_count": 0,
               "clicks_count": 0, "created_at": "2026-01-01T00:00:00Z", "updated_at": None,
               "content_expired_at": None,
               "events": [], "deliveries": []}
    return {"status": "success", "time": 0.01, "data": {"message": message}}


def test_the_response_check_rejects_a_field_the_schema_lacks(checker):
    info = _info("/api/v2/server/messages/{id}", "GET")
    good = _message_answer()
    assert checker.errors(info, json.dumps(good)) == []

    extra = _message_answer()
    extra["data"]["message"]["internal_note"] = "leaked"
    problems = checker.errors(info, json.dumps(extra))
    assert problems and "internal_note" in problems[0] and "data/message" in problems[0]

    wrong_type = _message_answer()
    wrong_type["data"]["message"]["size"] = "10"
    assert any("data/message/size" in p for p in checker.errors(info, json.dumps(wrong_type)))

    missing = _message_answer()
    del missing["data"]["message"]["events"]
    assert any("events" in p for p in checker.errors(info, json.dumps(missing)))

    bad_time = _message_answer()
    bad_time["data"]["message"]["created_at"] = "yesterday"
    assert any("created_at" in p for p in checker.errors(info, json.dumps(bad_time)))

    with pytest.raises(AssertionError, match="internal_note"):
        checker(info, SimpleNamespace(body=json.dumps(extra)))


def test_only_the_batch_routes_take_a_bare_array(document):
    arrays = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            schema = (operation.get("requestBody") or {}).get("content", {}).get(
                "application/json", {}).get("schema", {})
            for option in schema.get("anyOf", []):
                if option.get("type") == "array":
                    arrays.add((method, path))
                    assert (option["minItems"], option["maxItems"]) == (1, 500)
                    assert option["items"]["$ref"].endswith(("/SendRequest",
                                                             "/TemplateSendRequest"))
    assert arrays == {("post", "/api/v2/server/messages/batch"),
                      ("post", "/api/v2/server/messages/with_template/batch")}
