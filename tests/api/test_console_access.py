"""What the console needs from the API, without a browser: the messaging surface with a
Bearer session and X-Server (role-checked), the public sign-in options, and the console's
files served with their types and a strict CSP, while /api/ keeps the JSON envelope."""
from __future__ import annotations

import requests

from chalicelib.console import files as console, rules as console_rules
from tests.support import Api, make_tenant, unique

PASSWORD = "a long enough password"


def _user_in(api: Api, org: str, role: str) -> str:
    email = f"{unique(role)}@example.com"
    Api.data(api.post("/api/v2/admin/users", {"email_address": email, "password": PASSWORD}), 201)
    Api.data(api.post(f"/api/v2/admin/organizations/{org}/members",
                      {"email_address": email, "role": role}), 201)
    return Api.data(api.post("/api/v2/auth/login", {"email_address": email,
                                                   "password": PASSWORD}), 201)["session_token"]


def test_a_session_reaches_the_messaging_surface_by_role(api):
    tenant = make_tenant(api)
    other = make_tenant(api)
    viewer = _user_in(api, tenant.org, "viewer")
    member = _user_in(api, tenant.org, "member")
    here = {"X-Server": f"{tenant.org}/{tenant.server}"}
    send = {"from": f"app@{tenant.domain}", "to": ["ann@example.net"], "text_body": "hi"}

    # Reads: any role of the organization.
    shown = Api.data(api.get("/api/v2/server", bearer=viewer, headers=here))["server"]
    assert shown["permalink"] == tenant.server and shown["credential"] is None
    assert "messages" in Api.data(api.get("/api/v2/server/messages", bearer=viewer, headers=here))
    assert "stats" in Api.data(api.get("/api/v2/server/stats/deliveries", bearer=viewer,
                                       headers=here))
    # Writes: member and up.
    Api.error(api.post("/api/v2/server/messages", send, bearer=viewer, headers=here), 403,
              "Forbidden")
    Api.data(api.post("/api/v2/server/messages", send, bearer=member, headers=here), 201)
    # Another organization's server is not disclosed; the header is required and checked.
    Api.error(api.get("/api/v2/server/messages", bearer=member,
                      headers={"X-Server": f"{other.org}/{other.server}"}), 404, "NotFound")
    err = Api.error(api.get("/api/v2/server/messages", bearer=member), 422, "ValidationError")
    assert err["field"] == "X-Server"
    Api.error(api.get("/api/v2/server/messages", bearer="not-a-session", headers=here), 401,
              "Unauthorized")
    # The API key keeps working as before.
    assert Api.data(api.get("/api/v2/server", server_key=tenant.api_key))["server"]["credential"]


def test_sign_in_options_are_public(api, monkeypatch):
    options = Api.data(api.get("/api/v2/auth/options"))["options"]
    assert options["registration"] is False and options["sso"] is False
    assert options["minimum_password_length"] == 8 and options["first_run"] in (True, False)
    monkeypatch.setenv("AUTH_ALLOW_REGISTRATION", "true")
    assert Api.data(api.get("/api/v2/auth/options"))["options"]["registration"] is True


def test_sign_in_options_say_where_smtp_clients_connect(api, monkeypatch):
    smtp = Api.data(api.get("/api/v2/auth/options"))["options"]["smtp"]
    assert smtp == {"host": "mx.service.test", "starttls_ports": [2525], "tls_port": None,
                    "auth_requires_tls": True}
    # Taken from the gateway's settings: the listeners it opens, in that order, once each.
    monkeypatch.setenv("SMTP_PORT", "25")
    monkeypatch.setenv("SMTP_SUBMISSION_PORTS", "587, 25")
    monkeypatch.setenv("SMTP_TLS_PORT", "465")
    monkeypatch.setenv("SMTP_AUTH_REQUIRE_TLS", "false")
    smtp = Api.data(api.get("/api/v2/auth/options"))["options"]["smtp"]
    assert smtp == {"host": "mx.service.test", "starttls_ports": [25, 587], "tls_port": 465,
                    "auth_requires_tls": False}


def test_console_files_and_history_routing(stack):
    base = stack.base_url
    index = requests.get(base + "/", timeout=30)
    assert index.status_code == 200 and index.headers["Content-Type"] == "text/html; charset=utf-8"
    csp = index.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "<script" in index.text and "<script>" not in index.text  # no inline script
    # A page URL the Chalice routes know, and one only the history fallback serves.
    for path in ("/orgs/acme/servers/main/messages/12", "/sign-in"):
        assert requests.get(base + path, timeout=30).text == index.text
    deep = requests.get(base + "/some/other/page", headers={"Accept": "text/html"}, timeout=30)
    assert deep.status_code == 200 and deep.text == index.text
    # Without Accept: text/html an unknown path is the JSON 404; /api/ always is.
    assert requests.get(base + "/some/other/page", timeout=30).json()["error"]["code"] == "NotFound"
    api_404 = requests.get(base + "/api/v2/nothing", headers={"Accept": "text/html"}, timeout=30)
    assert api_404.status_code == 404 and api_404.json()["error"]["code"] == "NotFound"
    css = requests.get(base + "/assets/app.css", timeout=30)
    assert css.headers["Content-Type"].startswith("text/css") and css.headers["Cache-Control"] == "no-cache"
    module = requests.get(base + "/assets/pages/server/routes.js", timeout=30)
    assert module.status_code == 200 and module.headers["Content-Type"].startswith("text/javascript")
    for bad in ("/assets/nope.js", "/assets/.hidden.js", "/assets/pages/x.py"):
        assert requests.get(base + bad, timeout=30).status_code == 404


def test_the_rules_module_is_served_on_the_local_stack(stack):
    # Written by the service (chalicelib/console/rules.py), not a file: the local server answers
    # it through the same console route as Lambda, with the console's headers.
    answer = requests.get(stack.base_url + "/assets/generated/rules.js", timeout=30)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert answer.headers["Content-Security-Policy"] == console.CONTENT_SECURITY_POLICY
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.text == console_rules.module()
    assert "export const ACTIONS = " in answer.text
    # Only that name is generated; its neighbours are still files or 404s.
    assert requests.get(stack.base_url + "/assets/generated/other.js", timeout=30).status_code == 404
    index = requests.get(stack.base_url + "/", timeout=30).text
    assert '<link rel="modulepreload" href="/assets/generated/rules.js">' in index
