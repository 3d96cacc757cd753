"""Helpers for browser tests: every page of the console with data on it, a member of a tenant."""
from __future__ import annotations

import requests

from tests.browser.conftest import make_user
from tests.support import Api, make_tenant, unique, wait_for


def every_page(api, stack, mx, rx) -> tuple[dict, dict, dict]:
    """A server with something on every page, and an instance admin: (tenant-ish facts,
    the admin, {name: path} of every page of the console)."""
    tenant = make_tenant(api)
    admin = make_user(api, admin=True)
    base_api = tenant.server_path
    server_key = {"X-Server-API-Key": tenant.api_key}
    hook = Api.data(api.post(base_api + "/webhooks", {"url": rx.url}), 201)["webhook"]
    Api.data(api.post(base_api + "/routes", {"name": "support", "domain": tenant.domain,
                                             "mode": "hold"}), 201)
    Api.data(api.post(base_api + "/suppressions", {"address": "gone@example.net",
                                                   "reason": "asked us to stop"}), 201)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/invitations",
                      {"email_address": f"{unique('inv')}@example.com"}), 201)
    template = requests.post(f"{stack.base_url}/api/v2/server/templates", headers=server_key,
                             json={"name": "Welcome", "subject": "Hi {{ name }}",
                                   "html_body": "<p>Hello <b>{{ name }}</b></p>",
                                   "text_body": "Hello {{ name }}"}, timeout=30).json()
    permalink = template["data"]["template"]["permalink"]
    sent = requests.post(f"{stack.base_url}/api/v2/server/messages", headers=server_key,
                         json={"from": f"app@{tenant.domain}", "to": ["ann@example.net"],
                               "subject": "Page test", "html_body": "<p>Hi</p>"},
                         timeout=30).json()
    message_id = sent["data"]["recipients"][0]["id"]
    wait_for(lambda: mx.received_for("ann@example.net"), message="delivery to the MX")
    srv = f"/orgs/{tenant.org}/servers/{tenant.server}"
    pages = {
        "organizations": "/", "organization": f"/orgs/{tenant.org}",
        "overview": srv, "overview-7d": f"{srv}?range=7d", "messages": f"{srv}/messages",
        "messages-filtered": f"{srv}/messages?status=Sent&query=ann",
        "message": f"{srv}/messages/{message_id}", "domains": f"{srv}/domains",
        "credentials": f"{srv}/credentials", "webhooks": f"{srv}/webhooks",
        "webhook": f"{srv}/webhooks/{hook['id']}", "inbound": f"{srv}/inbound",
        "bounces": f"{srv}/bounces", "routes": f"{srv}/routes",
        "suppressions": f"{srv}/suppressions", "streams": f"{srv}/streams",
        "templates": f"{srv}/templates", "template": f"{srv}/templates/{permalink}",
        "settings": f"{srv}/settings", "account": "/account", "admin-users": "/admin/users",
        "admin-ip-pools": "/admin/ip-pools", "admin-api-keys": "/admin/api-keys",
        "admin-audit": "/admin/audit", "not-found": "/no/such/page",
    }
    facts = {"tenant": tenant, "hook": hook, "srv": srv, "base_api": base_api}
    return facts, admin, pages


def member_of(api, tenant, role: str = "member") -> dict:
    person = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"email_address": person["email_address"], "role": role}), 201)
    return person
