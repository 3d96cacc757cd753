"""Every error path of the HTTP layer answers the spec's envelope with a stable code."""
from __future__ import annotations

import socket

import requests

from tests.support import Api

ADMIN = "/api/v2/admin"


def test_health_is_not_enveloped_and_carries_the_version(api):
    response = requests.get(api.base_url + "/health", timeout=10)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and isinstance(body["version"], str) and body["version"]


def test_health_does_not_touch_storage(api, monkeypatch):
    from chalicelib.db import engine

    def refuse(*args, **kwargs):
        raise AssertionError("storage touched")

    monkeypatch.setattr(engine, "session_scope", refuse)
    monkeypatch.setattr(engine, "get_engine", refuse)
    assert requests.get(api.base_url + "/health", timeout=10).status_code == 200


def test_missing_and_wrong_credentials(api):
    Api.error(api.get(f"{ADMIN}/organizations", admin_key=""), 401, "Unauthorized")
    Api.error(api.get(f"{ADMIN}/organizations", admin_key="wrong-key"), 401, "Unauthorized")
    Api.error(api.get(f"{ADMIN}/organizations", bearer="not-a-session"), 401, "Unauthorized")
    Api.error(api.get("/api/v2/server/ping"), 401, "Unauthorized")
    Api.error(api.get("/api/v2/server/ping", server_key="nope"), 401, "Unauthorized")


def test_smtp_key_is_not_an_api_key(api, tenant):
    Api.error(api.get("/api/v2/server/ping", server_key=tenant.smtp_key), 401, "Unauthorized")


def test_malformed_json_wrong_types_and_missing_fields(api):
    raw = api.request("POST", f"{ADMIN}/organizations", data=b'{"name": ',
                      headers={"Content-Type": "application/json"})
    assert "not valid JSON" in Api.error(raw, 422, "ValidationError")["message"]
    not_object = api.request("POST", f"{ADMIN}/organizations", data=b'["a"]')
    Api.error(not_object, 422, "ValidationError")
    wrong_type = Api.error(api.post(f"{ADMIN}/organizations", {"name": 42}), 422, "ValidationError")
    assert wrong_type["field"] == "name" and "name" in wrong_type["message"]
    missing = Api.error(api.post(f"{ADMIN}/organizations", {}), 400, "ParameterMissing")
    assert missing["field"] == "name"
    empty = Api.error(api.post(f"{ADMIN}/organizations", {"name": ""}), 422, "ValidationError")
    assert empty["field"] == "name"


def test_wrong_content_type_still_gets_the_envelope(api):
    response = api.request("POST", f"{ADMIN}/organizations", data=b"name=x",
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    Api.error(response, 422, "ValidationError")


def test_unknown_ids_and_routes_are_404(api, tenant):
    Api.error(api.get(f"{ADMIN}/organizations/no-such-org"), 404, "NotFound")
    Api.error(api.get(f"{ADMIN}/organizations/{tenant.org}/servers/nope"), 404, "NotFound")
    Api.error(api.get(tenant.server_path + "/credentials/999999"), 404, "NotFound")
    Api.error(api.get(tenant.server_path + "/credentials/abc"), 404, "NotFound")
    Api.error(api.get(f"{ADMIN}/ip_pools/0"), 404, "NotFound")
    Api.error(api.get("/api/v2/no/such/route"), 404, "NotFound")


def test_method_not_allowed_is_enveloped(api):
    Api.error(api.request("PUT", f"{ADMIN}/organizations", json={}), 405, "MethodNotAllowed")


def test_oversized_body_is_refused_before_it_is_read(api, monkeypatch):
    monkeypatch.setenv("MAX_REQUEST_BYTES", "1KB")
    response = api.request("POST", f"{ADMIN}/organizations", data=b"{" + b" " * 5000 + b"}")
    Api.error(response, 413, "PayloadTooLarge")


def test_bad_content_length_is_a_clean_400(api):
    host, port = api.base_url.replace("http://", "").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /api/v2/admin/organizations HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: banana\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):  # the server closes after the error
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400") and b"ValidationError" in reply


def test_handler_crash_is_an_enveloped_500_without_a_trace(api, monkeypatch):
    from chalicelib.services.organizations import organizations

    def explode(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(organizations, "organizations_query", explode)
    response = api.get(f"{ADMIN}/organizations")
    error = Api.error(response, 500, "InternalError")
    assert "secret internal detail" not in response.text and "Traceback" not in response.text
    assert error["message"]


def test_failed_request_writes_nothing(api, tenant, monkeypatch):
    """A failure after a write inside the handler rolls the whole request back."""
    from chalicelib.api.response_builders import management as records

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(records, "server", explode)
    Api.error(api.post(f"{ADMIN}/organizations/{tenant.org}/servers", {"name": "Ghost"}), 500,
              "InternalError")
    monkeypatch.undo()
    names = [s["name"] for s in Api.data(api.get(f"{ADMIN}/organizations/{tenant.org}/servers"))["servers"]]
    assert "Ghost" not in names


def test_credentials_are_checked_before_the_body(api):
    response = api.request("POST", f"{ADMIN}/organizations", data=b"{broken", admin_key="")
    Api.error(response, 401, "Unauthorized")
    Api.error(api.post("/api/v2/server/messages", {"nope": 1}), 401, "Unauthorized")
