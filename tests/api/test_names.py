"""Every named resource's name is trimmed and refused when nothing but spaces is left, at
creation and on a change (api/request_bodies: one field type for all of them): a 422
ValidationError naming ``name``, nothing stored. Registration's person names likewise."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

from tests.support import Api, unique

ADMIN = "/api/v2/admin"
SERVER = "/api/v2/server"


@dataclass
class Kind:
    collection: Callable  # tenant -> the path to POST to
    key: str  # the record's key in the answer
    body: Callable = lambda tenant: {}  # the other fields a creation needs
    item: Callable | None = None  # (tenant, record) -> the path to PATCH; None: no rename
    stored: Callable = lambda name: name  # how the service spells a valid name
    server_key: bool = False  # a server API surface (X-Server-API-Key)


KINDS = {
    "organization": Kind(lambda t: f"{ADMIN}/organizations", "organization",
                         item=lambda t, r: f"{ADMIN}/organizations/{r['permalink']}"),
    "server": Kind(lambda t: f"{ADMIN}/organizations/{t.org}/servers", "server",
                   item=lambda t, r: f"{ADMIN}/organizations/{t.org}/servers/{r['permalink']}"),
    "domain": Kind(lambda t: t.server_path + "/domains", "domain",
                   stored=lambda name: name.lower()),
    "credential": Kind(lambda t: t.server_path + "/credentials", "credential",
                       body=lambda t: {"type": "API"},
                       item=lambda t, r: t.server_path + f"/credentials/{r['id']}"),
    "route": Kind(lambda t: t.server_path + "/routes", "route",
                  body=lambda t: {"domain": t.domain, "mode": "accept"},
                  item=lambda t, r: t.server_path + f"/routes/{r['id']}",
                  stored=lambda name: name.lower()),
    "webhook": Kind(lambda t: t.server_path + "/webhooks", "webhook",
                    body=lambda t: {"url": "http://127.0.0.1:9/hook"},
                    item=lambda t, r: t.server_path + f"/webhooks/{r['id']}"),
    "stream": Kind(lambda t: f"{SERVER}/streams", "stream",
                   body=lambda t: {"stream_type": "broadcast"},
                   item=lambda t, r: f"{SERVER}/streams/{r['permalink']}", server_key=True),
    "template": Kind(lambda t: f"{SERVER}/templates", "template",
                     body=lambda t: {"text_body": "Hi"},
                     item=lambda t, r: f"{SERVER}/templates/{r['permalink']}",
                     server_key=True),
    "ip pool": Kind(lambda t: f"{ADMIN}/ip_pools", "ip_pool"),
    "admin key": Kind(lambda t: f"{ADMIN}/admin_api_keys", "admin_api_key"),
}


def refused_as_empty(response) -> None:
    error = Api.error(response, 422, "ValidationError")
    assert error["field"] == "name" and "must not be empty" in error["message"], error


@pytest.mark.parametrize("kind", KINDS)
def test_names_are_trimmed_and_never_only_spaces(api, tenant, kind):
    spec = KINDS[kind]
    auth = {"server_key": tenant.api_key} if spec.server_key else {}
    path = spec.collection(tenant)

    def create(name):
        return api.post(path, {**spec.body(tenant), "name": name}, **auth)

    for blank in ("", "   ", " \t "):
        refused_as_empty(create(blank))
    name = unique("Named") + (".example.com" if kind == "domain" else "")
    record = Api.data(create(f"  {name}  "), 201)[spec.key]
    assert record["name"] == spec.stored(name)
    if spec.item is None:
        return
    item = spec.item(tenant, record)
    refused_as_empty(api.patch(item, {"name": "   "}, **auth))
    assert Api.data(api.get(item, **auth))[spec.key]["name"] == spec.stored(name)
    renamed = unique("Renamed")
    changed = Api.data(api.patch(item, {"name": f"\t{renamed} "}, **auth))[spec.key]
    assert changed["name"] == spec.stored(renamed)


def test_registration_refuses_names_of_spaces(api, monkeypatch):
    monkeypatch.setenv("AUTH_ALLOW_REGISTRATION", "true")
    body = {"email_address": f"{unique('reg')}@example.com", "password": "a long password",
            "first_name": "  Ada ", "last_name": "   "}
    error = Api.error(api.post("/api/v2/auth/register", body), 422, "ValidationError")
    assert error["field"] == "last_name" and "must not be empty" in error["message"]
    user = Api.data(api.post("/api/v2/auth/register", {**body, "last_name": " Lovelace"}),
                    201)["user"]
    assert (user["first_name"], user["last_name"]) == ("Ada", "Lovelace")
