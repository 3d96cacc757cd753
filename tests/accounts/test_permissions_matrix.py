"""Every management route of the running app, whoever added it, against callers who must not
act: a stranger to the organization gets 404 (instance-wide routes: 403), a read-only viewer
gets 403 on every write. Bodies are sampled from each route's own schema so they pass
validation and the permission check decides. A new route that forgets
``lookup.*``/``permissions.authorize`` fails here."""
from __future__ import annotations

import re
import types
from typing import Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from chalicelib.api.framework import ENDPOINTS
from tests.support.accounts import ADMIN, make_user
from tests.support import Api, unique

WRITE = ("POST", "PATCH", "PUT", "DELETE")
OPEN_TO_USERS = {("GET", "/organizations"), ("POST", "/organizations")}


def admin_routes():
    from app import app

    found = []
    for path, methods in app.routes.items():
        if not path.startswith(ADMIN):
            continue
        for method in methods:
            found.append((method, path[len(ADMIN):]))
    return sorted(found)


def body_model(method: str, path: str):
    for e in ENDPOINTS:
        if e.method == method and path.endswith(e.path) and e.body is not None:
            return e.body
    return None


def sample(annotation):
    """A plausible value of a type, so the body passes schema validation and the permission
    check (which comes next) decides the answer."""
    origin = get_origin(annotation)
    if origin is Literal:
        return get_args(annotation)[0]
    if origin in (Union, types.UnionType):
        return sample(next(a for a in get_args(annotation) if a is not type(None)))
    if origin in (list, tuple, set):
        return []
    if origin is dict or annotation is dict:
        return {}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sample_body(annotation)
    return {str: "x", int: 1, float: 1.0, bool: True}.get(annotation, "x")


def sample_body(model) -> dict:
    if model is None:
        return {}
    return {name: sample(f.annotation) for name, f in model.model_fields.items()
            if f.is_required()}


def fill(path: str, values: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), 1)), path)


@pytest.fixture(scope="module")
def world(stack):
    api = Api(stack.base_url, "test-admin-key-0123456789abcdef")
    owner, viewer, stranger = make_user(api), make_user(api), make_user(api)
    org = Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("M")}, bearer=owner.token),
                   201)["organization"]["permalink"]
    Api.data(api.post(f"{ADMIN}/organizations/{org}/members",
                      {"user_id": viewer.id, "role": "viewer"}, bearer=owner.token), 201)
    srv = Api.data(api.post(f"{ADMIN}/organizations/{org}/servers", {"name": "S"},
                            bearer=owner.token), 201)["server"]["permalink"]
    values = {"org": org, "server": srv, "user_id": owner.id, "name": "example.com",
              "address": "someone@example.com", "id": 1, "pool_id": 1, "permalink": "x"}
    return api, owner, viewer, stranger, values


def test_routes_are_found():
    routes = admin_routes()
    assert ("GET", "/organizations/{org}/members") in routes and len(routes) > 40


@pytest.mark.parametrize("method,path", admin_routes())
def test_a_stranger_cannot_reach_another_organization(world, method, path):
    api, _, _, stranger, values = world
    if (method, path) in OPEN_TO_USERS:
        return
    response = api.request(method, ADMIN + fill(path, values),
                           json=sample_body(body_model(method, path)), bearer=stranger.token)
    assert response.status_code not in range(200, 300), (method, path, response.text[:300])
    code = response.json()["error"]["code"]
    if "{org}" in path:
        expected = {"NotFound"}
    else:  # instance-wide resources: instance admins only
        expected = {"Forbidden"}
    assert code in expected, (method, path, response.status_code, code)


@pytest.mark.parametrize("method,path", [r for r in admin_routes()
                                         if r[0] in WRITE and "{org}" in r[1]])
def test_a_viewer_cannot_change_anything(world, method, path):
    api, owner, viewer, _, values = world
    response = api.request(method, ADMIN + fill(path, values),
                           json=sample_body(body_model(method, path)), bearer=viewer.token)
    assert response.status_code not in range(200, 300), (method, path, response.text[:300])
    code = response.json()["error"]["code"]
    expected = {"Forbidden"}
    assert code in expected, (method, path, response.status_code, code)
