"""Every page of the console opens with a heading, no error page and no JavaScript error
(the ``console`` fixture fails the test on any), for an instance admin on a server with
something on every page. Each page's screenshot goes to var/screenshots/."""
from __future__ import annotations

import requests

from chalicelib.console import rules as console_rules
from tests.browser.conftest import make_user
from tests.receivers import Receiver
from tests.support import Api, make_tenant, unique, wait_for

# Page -> (its status filter, the vocabulary it offers).
STATUS_FILTERS = {"messages": ("#f-status", "MESSAGE_STATUSES"),
                  "inbound": ("#in-status", "INBOUND_STATUSES")}


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


def test_every_page_opens_without_errors(console, api, stack, mx):
    with Receiver([200] * 20) as rx:
        facts, admin, pages = every_page(api, stack, mx, rx)
        hook, srv, base_api = (facts[k] for k in ("hook", "srv", "base_api"))
        console.sign_in(admin["email_address"])
        page = console.page
        for name, path in pages.items():
            page.goto(console.base_url + path)  # a full load each time: deep links work
            heading = page.locator("main h1")
            heading.wait_for()
            text = heading.inner_text()
            if name == "not-found":
                assert text == "Page not found"
            else:
                assert text and text not in ("Something went wrong", "Not found"), (name, text)
            if name == "template":  # the preview is rendered by the service
                page.locator("pre", has_text="Hello Ada").wait_for()
            if name in STATUS_FILTERS:  # the service's vocabulary (generated/rules.js)
                select, vocabulary = STATUS_FILTERS[name]
                offered = page.locator(f"{select} option").all_inner_texts()
                # (The messages' filter groups its statuses by direction: any order.)
                assert sorted(offered) == sorted(["Any", *console_rules.tables()[vocabulary]]), name
            console.shot(f"page-{name}")
        # Edits on two of those pages go through the API: a webhook's events, the IP pool.
        page.goto(console.base_url + f"{srv}/webhooks/{hook['id']}")
        page.get_by_label("MessageDeliveryFailed").check()
        page.get_by_role("textbox", name="Name", exact=True).fill("failures")
        page.get_by_role("button", name="Save changes").click()
        page.get_by_role("heading", name="failures", level=1).wait_for()
        changed = Api.data(api.get(base_api + f"/webhooks/{hook['id']}"))["webhook"]
        assert changed["events"] == ["MessageDeliveryFailed"] and changed["url"] == rx.url
        pool = Api.data(api.post("/api/v2/admin/ip_pools", {"name": unique("pool")}), 201)["ip_pool"]
        page.goto(console.base_url + f"{srv}/settings")
        page.get_by_label("Send from").select_option(str(pool["id"]))
        page.get_by_role("button", name="Assign pool").click()
        page.get_by_text("Saved.").wait_for()
        assert Api.data(api.get(base_api))["server"]["ip_pool_id"] == pool["id"]
        # The CSP forbids inline script and other origins on every console answer.
        html = requests.get(console.base_url + "/orgs/x", headers={"Accept": "text/html"},
                            timeout=30)
        csp = html.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert html.headers["Content-Type"].startswith("text/html")
        js = requests.get(console.base_url + "/assets/app.js", timeout=30)
        assert js.headers["Content-Type"].startswith("text/javascript")
        assert requests.get(console.base_url + "/assets/../README.md", timeout=30).status_code == 404
