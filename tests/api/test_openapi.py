"""The committed openapi.json, the generator and the Chalice routes must agree: a new or
changed endpoint without a regenerated document fails here
(`python -m chalicelib.api.openapi > openapi.json`)."""
from __future__ import annotations

import json
import os

import pytest

from chalicelib.api import openapi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HTTP_METHODS = {"get", "post", "put", "patch", "delete", "head", "options"}


@pytest.fixture(scope="module")
def document():
    import app  # noqa: F401  (registers every blueprint, as in Lambda)

    return openapi.generate()


def _operations(document):
    return {(path, method.upper()) for path, item in document["paths"].items()
            for method in item if method in HTTP_METHODS}


def test_committed_document_is_current(document):
    with open(os.path.join(ROOT, "openapi.json"), encoding="utf-8") as fh:
        committed = json.load(fh)
    assert committed == json.loads(json.dumps(document)), \
        "openapi.json is stale: run `make openapi`"


def test_every_route_is_documented_and_vice_versa(document):
    from app import app
    from chalicelib.api.console import ROUTE_PATHS  # the web console's files, not the API

    routes = {(path, method) for path, methods in app.routes.items() for method in methods
              if path not in ROUTE_PATHS}
    assert routes == _operations(document)
    assert ROUTE_PATHS <= set(app.routes)


def test_document_shape(document):
    assert document["openapi"] == "3.1.0"
    schemes = document["components"]["securitySchemes"]
    assert schemes["ServerApiKey"]["name"] == "X-Server-API-Key"
    assert schemes["AdminApiKey"]["name"] == "X-Admin-API-Key"
    assert schemes["BearerSession"]["scheme"] == "bearer"
    send = document["paths"]["/api/v2/server/messages"]["post"]
    # An API key, or (the console) a session naming the server in X-Server.
    assert send["security"] == [{"ServerApiKey": []}, {"BearerSession": [], "ServerSelector": []}]
    assert "201" in send["responses"] and "422" in send["responses"]
    # The request body is the very pydantic model the handler validates with.
    body_ref = send["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][body_ref.rsplit("/", 1)[-1]]
    assert set(schema["required"]) >= {"from", "to"}
    orgs = document["paths"]["/api/v2/admin/organizations"]["post"]
    assert orgs["security"] == [{"AdminApiKey": []}, {"BearerSession": []}]
    assert document["paths"]["/health"]["get"]["security"] == []


def test_every_reference_resolves(document):
    refs = []

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert refs
    for ref in refs:
        _, section, name = ref.lstrip("#/").split("/", 2)
        assert name in document["components"][section], ref


def test_served_document_matches(api):
    resp = api.get(openapi.OPENAPI_PATH)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    served = resp.json()
    assert served["openapi"] == "3.1.0"
    assert ("/api/v2/openapi.json", "GET") in _operations(served)
