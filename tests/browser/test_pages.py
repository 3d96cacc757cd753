"""Every page of the console opens with a heading, no error page and no JavaScript error
(the ``console`` fixture fails the test on any), for an instance admin on a server with
something on every page. Each page's screenshot goes to var/screenshots/."""
from __future__ import annotations

import requests

from chalicelib.console import rules as console_rules
from tests.receivers import Receiver
from tests.support import Api, unique
from tests.support.browser import every_page

# Page -> (its status filter, the vocabulary it offers).
STATUS_FILTERS = {"messages": ("#f-status", "MESSAGE_STATUSES"),
                  "inbound": ("#in-status", "INBOUND_STATUSES")}




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
