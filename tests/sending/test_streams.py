"""Message streams through real HTTP: the default stream, create/show/update/archive."""
from __future__ import annotations

from tests.support import Api

S = "/api/v2/server"


def test_every_server_has_a_default_transactional_stream(api, tenant):
    listed = Api.data(api.get(S + "/streams", server_key=tenant.api_key))
    assert [s["permalink"] for s in listed["streams"]] == ["outbound"]
    default = listed["streams"][0]
    assert default["stream_type"] == "transactional" and default["default"] is True
    assert default["archived"] is False and listed["pagination"]["total"] == 1
    shown = Api.data(api.get(S + "/streams/outbound", server_key=tenant.api_key))["stream"]
    assert shown == default


def test_create_show_update_and_archive_a_broadcast_stream(api, tenant):
    key = tenant.api_key
    created = Api.data(api.post(S + "/streams", {"name": "Newsletters", "stream_type": "broadcast",
                                                 "description": "monthly"}, server_key=key),
                       201)["stream"]
    assert created["permalink"] == "newsletters" and created["stream_type"] == "broadcast"
    assert created["default"] is False and created["description"] == "monthly"
    # The permalink is generated from the name and unique per server.
    second = Api.data(api.post(S + "/streams", {"name": "Newsletters"}, server_key=key),
                      201)["stream"]
    assert second["permalink"] == "newsletters-2" and second["stream_type"] == "transactional"

    updated = Api.data(api.patch(S + "/streams/newsletters",
                                 {"name": "News", "description": None}, server_key=key))["stream"]
    assert updated["name"] == "News" and updated["description"] is None
    assert updated["stream_type"] == "broadcast"
    err = Api.error(api.patch(S + "/streams/newsletters", {"stream_type": "transactional"},
                              server_key=key), 422, "ValidationError")
    assert err["field"] == "stream_type"
    # Repeating the unchanged type is fine.
    Api.data(api.patch(S + "/streams/newsletters", {"stream_type": "broadcast"}, server_key=key))

    only_broadcast = Api.data(api.get(S + "/streams?stream_type=broadcast", server_key=key))
    assert [s["permalink"] for s in only_broadcast["streams"]] == ["newsletters"]

    archived = Api.data(api.post(S + "/streams/newsletters/archive", server_key=key))["stream"]
    assert archived["archived"] is True and archived["archived_at"]
    again = Api.data(api.post(S + "/streams/newsletters/archive", server_key=key))["stream"]
    assert again["archived_at"] == archived["archived_at"]  # idempotent
    names = [s["permalink"] for s in Api.data(api.get(S + "/streams", server_key=key))["streams"]]
    assert names == ["outbound", "newsletters-2"]
    with_archived = Api.data(api.get(S + "/streams?include_archived=true", server_key=key))
    assert "newsletters" in [s["permalink"] for s in with_archived["streams"]]
    # An archived stream is still shown; its permalink stays taken.
    assert Api.data(api.get(S + "/streams/newsletters", server_key=key))["stream"]["archived"]
    Api.error(api.post(S + "/streams", {"name": "x", "permalink": "newsletters"}, server_key=key),
              422, "ValidationError")


def test_default_stream_cannot_be_archived(api, tenant):
    err = Api.error(api.post(S + "/streams/outbound/archive", server_key=tenant.api_key),
                    422, "ValidationError")
    assert "default stream" in err["message"]
    assert Api.data(api.get(S + "/streams/outbound",
                            server_key=tenant.api_key))["stream"]["archived"] is False


def test_stream_input_errors(api, tenant):
    key = tenant.api_key
    err = Api.error(api.post(S + "/streams", {"stream_type": "broadcast"}, server_key=key),
                    400, "ParameterMissing")
    assert err["field"] == "name"
    err = Api.error(api.post(S + "/streams", {"name": "x", "stream_type": "inbound"},
                             server_key=key), 422, "ValidationError")
    assert err["field"] == "stream_type"
    err = Api.error(api.post(S + "/streams", {"name": "x", "permalink": "Bad Link!"},
                             server_key=key), 422, "ValidationError")
    assert err["field"] == "permalink"
    Api.error(api.get(S + "/streams?include_archived=maybe", server_key=key), 422,
              "ValidationError")
    Api.error(api.get(S + "/streams?stream_type=other", server_key=key), 422, "ValidationError")
    Api.error(api.get(S + "/streams/nope", server_key=key), 404, "NotFound")
    Api.error(api.patch(S + "/streams/nope", {"name": "y"}, server_key=key), 404, "NotFound")
    Api.error(api.post(S + "/streams/nope/archive", server_key=key), 404, "NotFound")
    Api.error(api.get(S + "/streams"), 401, "Unauthorized")


def test_streams_are_per_server(api, tenant):
    from tests.support import make_tenant

    other = make_tenant(api)
    Api.data(api.post(S + "/streams", {"name": "Private", "permalink": "private"},
                      server_key=tenant.api_key), 201)
    Api.error(api.get(S + "/streams/private", server_key=other.api_key), 404, "NotFound")
    # The same permalink is free on another server.
    Api.data(api.post(S + "/streams", {"name": "Private", "permalink": "private"},
                      server_key=other.api_key), 201)


def test_unarchive_lets_sends_name_the_stream_again(api, tenant):
    key = tenant.api_key
    Api.data(api.post(S + "/streams", {"name": "Digest"}, server_key=key), 201)
    Api.data(api.post(S + "/streams/digest/archive", server_key=key))
    send = {"from": f"app@{tenant.domain}", "to": ["ann@example.net"], "subject": "s",
            "text_body": "t", "stream": "digest"}
    Api.error(api.post(S + "/messages", send, server_key=key), 422, "ValidationError")
    back = Api.data(api.post(S + "/streams/digest/unarchive", server_key=key))["stream"]
    assert back["archived"] is False and back["archived_at"] is None
    assert Api.data(api.post(S + "/streams/digest/unarchive", server_key=key))["stream"] == back
    Api.data(api.post(S + "/messages", send, server_key=key), 201)
    Api.error(api.post(S + "/streams/nope/unarchive", server_key=key), 404, "NotFound")
