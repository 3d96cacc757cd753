"""Hostile JSON bodies against every body-taking endpoint, generated from the route table (a new
endpoint is covered without editing this file): deep nesting, numbers past any column,
non-finite numbers, invalid UTF-8, and non-object top levels. None may answer a 5xx or log a
traceback; the ones the parser refuses answer 422 ValidationError saying why."""
from __future__ import annotations

import logging
import re

import pytest

from chalicelib.api import framework, json_body, openapi
from tests.support.accounts import make_user
from tests.support import Api

DEEP = b'{"a":' * 5000 + b"1" + b"}" * 5000
REFUSED_BY_THE_PARSER = {
    "deep object": (DEEP, "deeper than 64 levels"),
    "deep array": (b"[" * 5000 + b"]" * 5000, "deeper than 64 levels"),
    "just past the limit": (b'{"a":' + b"[" * json_body.MAX_DEPTH + b"]" * json_body.MAX_DEPTH
                            + b"}", "deeper than 64 levels"),
    "huge integer": (b'{"name": 1' + b"0" * 5000 + b"}", "outside the range"),
    "integer past BIGINT": (b'{"name": 9223372036854775808}', "outside the range"),
    "infinite float": (b'{"name": 1e999}', "outside the range"),
    "NaN": (b'{"name": NaN}', "not valid JSON"),
    "invalid UTF-8": (b'{"name": "\xff\xfe"}', "not valid UTF-8"),
}
OTHER_TOP_LEVELS = [b"[]", b'"x"', b"null", b"1", b"[" + b"{}," * 100 + b"{}]"]


def _body_routes() -> list[tuple[str, framework.EndpointInfo]]:
    return [(path, info) for path, info in openapi.route_table()
            # A raw route without a body model reads its own (form) body: not JSON's path.
            if info.method in ("POST", "PATCH", "PUT") and (info.body or not info.raw)]


def _fill(path: str) -> str:
    return re.sub(r"\{(\w+)\}",
                  lambda m: "1" if m.group(1) in framework.INTEGER_PARAMS else "x", path)


@pytest.fixture(scope="module")
def credentials(stack):
    from tests.conftest import TEST_ADMIN_KEY
    from tests.support import make_tenant

    api = Api(stack.base_url, TEST_ADMIN_KEY)
    server = {"X-Server-API-Key": make_tenant(api).api_key}
    return {framework.ADMIN: {"X-Admin-API-Key": TEST_ADMIN_KEY},
            framework.SERVER: server, framework.SERVER_READ: server,
            framework.SESSION: {"Authorization": f"Bearer {make_user(api).token}"},
            framework.NONE: {}}


def test_the_route_table_has_body_taking_endpoints_of_every_kind():
    auths = {info.auth for _, info in _body_routes()}
    assert len(_body_routes()) > 40 and auths == {
        framework.ADMIN, framework.SERVER, framework.SERVER_READ, framework.SESSION,
        framework.NONE}


@pytest.mark.parametrize("path,info", _body_routes(),
                         ids=[f"{i.method} {p}" for p, i in _body_routes()])
def test_hostile_bodies_never_answer_5xx(api, credentials, caplog, path, info):
    url = _fill(path)
    headers = {"Content-Type": "application/json", **credentials[info.auth]}
    caplog.set_level(logging.ERROR)
    for name, (raw, says) in REFUSED_BY_THE_PARSER.items():
        resp = api.http.request(info.method, api.base_url + url, data=raw, headers=headers,
                                timeout=30)
        err = Api.error(resp, 422, "ValidationError")
        assert says in err["message"], (name, err)
    for raw in OTHER_TOP_LEVELS:
        resp = api.http.request(info.method, api.base_url + url, data=raw, headers=headers,
                                timeout=30)
        assert resp.status_code < 500, (raw[:20], resp.text)
        assert resp.json()["status"] in ("success", "error")
    tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not tracebacks, [r.getMessage() for r in tracebacks]
