"""The OpenAPI 3.1 document of all three surfaces, generated from what the handlers really do:
``framework.ENDPOINTS`` (path, method, auth, the pydantic body model a handler validates with,
success status) and the url prefix of each blueprint from ``api.blueprints()``. Nothing here
is written by hand per endpoint, so the document cannot silently drift from the code; the
committed ``openapi.json`` is checked against this generator by ``tests/api/test_openapi.py``.

Served at ``GET /api/v2/openapi.json`` (outside the envelope, as OpenAPI tools expect) and
printed by ``python -m chalicelib.api.openapi > openapi.json``.
"""
from __future__ import annotations

import importlib
import json
import re
from typing import Any

from annotated_types import MaxLen, MinLen
from chalice import Blueprint, Response

from chalicelib import __version__
from chalicelib.api import framework
from chalicelib.api.errors import STATUS_BY_CODE
from chalicelib.api.framework import ADMIN, NONE, SERVER, SERVER_READ, SESSION, Call, endpoint

bp = Blueprint(__name__)

OPENAPI_PATH = "/api/v2/openapi.json"
_PARAM = re.compile(r"{(\w+)}")
# Messaging endpoints that read (or resend) a message's stored content: ContentExpired (410)
# once content retention or a data removal erased it.
_READS_CONTENT = re.compile(r"^/api/v2/server/((messages|captured|inbound)/{id}"
                            r"(/raw|/content|/attachments/{index}|/retry|/bypass)"
                            r"|captured/{id}|mail_frames)$")
_METHOD_ORDER = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_SURFACES = (("/api/v2/server", "Messaging"), ("/api/v2/admin", "Management"),
             ("/api/v2/auth", "Accounts"))

SECURITY_SCHEMES = {
    "ServerApiKey": {"type": "apiKey", "in": "header", "name": "X-Server-API-Key",
                     "description": "Key of a server's API credential (messaging surface)."},
    "AdminApiKey": {"type": "apiKey", "in": "header", "name": "X-Admin-API-Key",
                    "description": "Admin API key (full management access)."},
    "BearerSession": {"type": "http", "scheme": "bearer",
                      "description": "Session token from POST /api/v2/auth/login."},
    "ServerSelector": {"type": "apiKey", "in": "header", "name": "X-Server",
                       "description": "With a Bearer session on the messaging surface: the "
                                      "server as <organization>/<server> (permalinks); the "
                                      "user's role decides (reads, renders and mail frames: viewer; "
                                      "writes: member)."},
}
_SECURITY = {
    NONE: [],
    SERVER: [{"ServerApiKey": []}, {"BearerSession": [], "ServerSelector": []}],
    SERVER_READ: [{"ServerApiKey": []}, {"BearerSession": [], "ServerSelector": []}],
    ADMIN: [{"AdminApiKey": []}, {"BearerSession": []}],
    SESSION: [{"BearerSession": []}],
}

ENVELOPE_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "enum": sorted(STATUS_BY_CODE),
                     "description": "Stable error code; clients branch on it."},
            "message": {"type": "string"},
            "field": {"type": "string", "description": "The request field at fault, if any."},
        },
    },
    "ErrorEnvelope": {
        "type": "object",
        "required": ["status", "time", "error"],
        "properties": {
            "status": {"const": "error"},
            "time": {"type": "number", "description": "Server-side processing seconds."},
            "error": {"$ref": "#/components/schemas/Error"},
        },
    },
}


def route_table() -> list[tuple[str, framework.EndpointInfo]]:
    """(full path, endpoint) of every registered endpoint, importing each blueprint module."""
    from chalicelib.api import blueprints

    prefixes: dict[int, str] = {}
    for module_path, prefix in blueprints():
        prefixes[id(importlib.import_module(module_path).bp)] = prefix
    table = []
    for info in framework.ENDPOINTS:
        prefix = prefixes.get(id(info.blueprint))
        if prefix is None:  # a blueprint that is not registered on the app serves nothing
            continue
        table.append((prefix + info.path, info))
    return table


def _tag(path: str) -> str:
    for prefix, tag in _SURFACES:
        if path.startswith(prefix):
            return tag
    return "Public"


def _parameters(path: str) -> list[dict]:
    params = []
    for name in _PARAM.findall(path):
        schema = {"type": "integer", "minimum": 1, "maximum": framework.MAX_ID} \
            if name in framework.INTEGER_PARAMS else {"type": "string", "minLength": 1}
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    return params


ERROR_RESPONSES = {
    "Unauthorized": (401, "Missing or invalid credentials."),
    "Forbidden": (403, "The caller lacks permission (or the server is suspended)."),
    "NotFound": (404, "No such resource."),
    "ParameterMissing": (400, "A required field is absent; error.field names it."),
    "PayloadTooLarge": (413, "The body is larger than MAX_REQUEST_BYTES."),
    "RateLimited": (429, "This API key is over API_RATE_LIMIT_PER_SECOND, or (sends) the "
                         "server is over a send limit with action reject (error.code "
                         "SendLimitExceeded); Retry-After says when to try again."),
    "ValidationError": (422, "Invalid request; error.field names the field (error.code "
                             "IdempotencyKeyReused: the Idempotency-Key was used with another "
                             "request in the last 24 hours)."),
    "IdempotencyInProgress": (409, "A request with this Idempotency-Key is still being "
                                   "processed; retry after Retry-After seconds for its answer."),
    "IdempotencyKeyReused": (422, "The Idempotency-Key was used with another request in the "
                                  "last 24 hours."),
    "ContentExpired": (410, "The message's content (raw source, signed copy) was erased by "
                            "its server's content_retention_days or a data removal; its "
                            "record, events and attempts are kept."),
    "SendLimitExceeded": (429, "The server is over its send_limit_per_hour/per_day with "
                               "send_limit_action reject; Retry-After says when the window "
                               "resets."),
}

IDEMPOTENCY_HEADER = {
    "name": "Idempotency-Key", "in": "header", "required": False,
    "description": "Scoped to the server: within 24 hours the same key with the same request "
                   "answers the first answer again (header Idempotent-Replayed: true) and "
                   "creates nothing; with another request it is a 422 IdempotencyKeyReused; "
                   "while the first still runs, a 409 IdempotencyInProgress.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255,
               "pattern": "^[\\x20-\\x7e]+$"},
}


def _error_responses() -> dict:
    return {code: {"description": f"{code}: {text}", "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}}
        for code, (_, text) in ERROR_RESPONSES.items()}


def _ref(code: str) -> tuple[str, dict]:
    return str(ERROR_RESPONSES[code][0]), {"$ref": f"#/components/responses/{code}"}


def envelope(data_ref: dict) -> dict:
    """The success envelope around ``data`` of the given schema."""
    return {"type": "object", "required": ["status", "time", "data"],
            "additionalProperties": False,
            "properties": {"status": {"const": "success"},
                           "time": {"type": "number",
                                    "description": "Server-side processing seconds."},
                           "data": data_ref}}


def _responses(path: str, info: framework.EndpointInfo, data_refs: dict) -> dict:
    responses: dict[str, Any] = {}
    if info.response is not None:
        responses[str(info.status)] = {"description": "Success.", "content": {
            "application/json": {"schema": envelope(data_refs[info.response])}}}
    if info.raw:
        responses["default"] = {"description": "Answered outside the envelope "
                                "(redirect, image or document)."}
    elif info.response is None:
        raise TypeError(f"{info.method} {path} declares no response shape "
                        "(@endpoint(..., response=...))")
    codes = []
    if info.auth != NONE:
        codes += ["Unauthorized", "Forbidden"]
    if info.auth in (SERVER, SERVER_READ):
        codes.append("RateLimited")
    if _PARAM.search(path):
        codes.append("NotFound")
    if info.body is not None or info.method in ("POST", "PATCH", "PUT"):
        codes += ["ParameterMissing", "PayloadTooLarge", "ValidationError"]
    if info.idempotent:
        codes.append("IdempotencyInProgress")
    if _READS_CONTENT.search(path) and info.method in ("GET", "POST"):
        codes.append("ContentExpired")
    responses.update(_ref(code) for code in codes)
    return dict(sorted(responses.items()))


def _summary(info: framework.EndpointInfo) -> str:
    if info.summary != info.name:
        return info.summary
    return info.name.replace("_", " ").capitalize()


def _operation_ids(table: list[tuple[str, framework.EndpointInfo]]) -> dict[int, str]:
    """Handler names, qualified by their module where two handlers share a name."""
    counts: dict[str, int] = {}
    for _, info in table:
        counts[info.name] = counts.get(info.name, 0) + 1
    ids = {}
    for _, info in table:
        module = (getattr(info.blueprint, "_import_name", "") or "").rsplit(".", 1)[-1]
        ids[id(info)] = info.name if counts[info.name] == 1 else f"{module}_{info.name}"
    return ids


def _model_schemas(bodies: list[type], answers: list[type]) \
        -> tuple[dict[type, dict], dict[type, dict], dict[str, Any]]:
    """$refs of the request bodies (pydantic models, as validated) and of the answers' data
    (chalicelib/response_shapes TypedDicts, as serialised), and the component schemas they point to."""
    from pydantic import TypeAdapter
    from pydantic.json_schema import models_json_schema

    ref = "#/components/schemas/{model}"
    body_refs: dict[type, dict] = {}
    definitions: dict[str, Any] = {}
    if bodies:
        refs, top = models_json_schema([(m, "validation") for m in bodies], ref_template=ref)
        body_refs = {m: schema for (m, _), schema in refs.items()}
        definitions.update(top.get("$defs", {}))
    data_refs: dict[type, dict] = {}
    if answers:
        refs, top = TypeAdapter.json_schemas(
            [(m, "serialization", TypeAdapter(m)) for m in answers], ref_template=ref)
        data_refs = {m: schema for (m, _), schema in refs.items()}
        clash = definitions.keys() & top.get("$defs", {}).keys()
        if clash:  # a body model and a record shape may not share a name
            raise TypeError(f"schema names used twice: {sorted(clash)}")
        definitions.update(top.get("$defs", {}))
    return body_refs, data_refs, definitions


def _health_operation() -> dict:
    return {"get": {
        "operationId": "health", "tags": ["Instance"], "security": [],
        "summary": "Liveness probe; never touches storage (not in the envelope).",
        "responses": {"200": {"description": "The service runs.", "content": {
            "application/json": {"schema": {
                "type": "object", "required": ["status", "version"],
                "properties": {"status": {"const": "ok"}, "version": {"type": "string"}}}}}}},
    }}


def generate() -> dict:
    table = route_table()
    bodies = {info.body for _, info in table if info.body is not None}
    bodies |= {info.body.ENTRY for _, info in table if info.array_field}
    models = sorted(bodies, key=lambda m: (m.__name__, m.__module__))
    answers = sorted({info.response for _, info in table if info.response is not None},
                     key=lambda m: (m.__name__, m.__module__))
    body_refs, data_refs, definitions = _model_schemas(models, answers)
    op_ids = _operation_ids(table)

    paths: dict[str, dict] = {"/health": _health_operation()}
    for path, info in sorted(table, key=lambda item: (item[0], _METHOD_ORDER.index(item[1].method))):
        operation: dict[str, Any] = {
            "operationId": op_ids[id(info)],
            "summary": _summary(info),
            "tags": [_tag(path)],
            "security": _SECURITY[info.auth],
            "responses": _responses(path, info, data_refs),
        }
        params = _parameters(path) + [param.openapi() for param in info.query]
        if info.idempotent:
            params.append(IDEMPOTENCY_HEADER)
        if params:
            operation["parameters"] = params
        if info.body is not None:
            schema = body_refs[info.body]
            if info.array_field:  # the bare-array form of the batch routes
                field = info.body.model_fields[info.array_field]
                limits = {**{"minItems": m.min_length for m in field.metadata
                             if isinstance(m, MinLen)},
                          **{"maxItems": m.max_length for m in field.metadata
                             if isinstance(m, MaxLen)}}
                schema = {"anyOf": [schema, {"type": "array", **limits,
                                             "items": body_refs[info.body.ENTRY]}]}
            operation["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": schema}}}
        paths.setdefault(path, {})[info.method.lower()] = operation

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Transactional Email Service API",
            "version": __version__,
            "description": "Messaging (X-Server-API-Key), management (X-Admin-API-Key or a "
                           "Bearer session) and accounts. Every answer except /health, the "
                           "tracking endpoints and this document uses the envelope "
                           "{status, time, data | error}.",
        },
        "tags": [{"name": name} for name in ("Messaging", "Management", "Accounts", "Public",
                                             "Instance")],
        "paths": paths,
        "components": {
            "securitySchemes": SECURITY_SCHEMES,
            "responses": _error_responses(),
            "schemas": {**ENVELOPE_SCHEMAS, **dict(sorted(definitions.items()))},
        },
    }


def render() -> str:
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


_cached: str | None = None


@endpoint(bp, OPENAPI_PATH, "GET", auth=NONE, raw=True)
def openapi_document(call: Call):
    """The OpenAPI 3.1 document of this API (not in the envelope)."""
    global _cached
    if _cached is None:
        _cached = render()
    return Response(body=_cached, status_code=200,
                    headers={"Content-Type": "application/json",
                             "Cache-Control": "public, max-age=300"})


def main() -> None:
    import sys

    sys.stdout.write(render())


if __name__ == "__main__":
    main()
