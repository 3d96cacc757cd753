"""The first hour of a new tenant, in a real browser: register, create an organization and a
server, add a domain and see its DNS records, verify it, create an API credential, watch a
message sent over the API appear with its status and its delivery attempt, send a webhook
test, and see the overview chart drawn."""
from __future__ import annotations

import re

import requests

from tests.browser.conftest import PASSWORD, make_user
from tests.receivers import Receiver
from tests.support import unique


def test_the_first_hour_of_a_new_tenant(console, api, stack, mx, monkeypatch):
    monkeypatch.setenv("AUTH_ALLOW_REGISTRATION", "true")
    make_user(api)  # an installation already set up (else sign-in would open the set-up)
    email = f"{unique('founder')}@example.com"
    org_name = unique("Acme")
    domain = f"{unique('mail')}.example.com"

    # Register (allowed here); the answer signs in.
    page = console.open("/sign-in")
    page.get_by_role("link", name="Create an account").click()
    # The sign-in form has an "Email address" too: wait for the register page to replace it.
    page.get_by_role("heading", name="Create an account", level=1).wait_for()
    page.get_by_label("Email address").fill(email)
    page.get_by_label("First name").fill("Grace")
    page.get_by_label("Last name").fill("Hopper")
    page.get_by_label("Password").fill("short")
    page.get_by_role("button", name="Create account").click()
    # The API's message shows next to the field it names, in the form's words.
    page.locator(".field-error", has_text="Password must be at least").wait_for()
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    page.get_by_role("heading", name="Organizations", level=1).wait_for()
    console.shot("organizations-empty")

    # An organization, then a server in it.
    page.get_by_label("Name").fill(org_name)
    page.get_by_role("button", name="Create organization").click()
    page.get_by_role("heading", name=org_name, level=1).wait_for()
    page.get_by_label("New server name").fill("Production")
    page.get_by_role("button", name="Create server").click()
    page.get_by_role("heading", name="Production", level=1).wait_for()
    server_url = page.url
    assert re.search(r"/orgs/[^/]+/servers/production$", server_url)

    # A domain: its DNS records with copy buttons, then verify.
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Domains").click()
    page.get_by_role("heading", name="Domains", level=1).wait_for()
    page.get_by_label("Domain name").fill(domain)
    page.get_by_role("button", name="Add domain").click()
    page.get_by_role("heading", name=re.compile(re.escape(domain))).wait_for()
    records = page.get_by_role("list", name=f"DNS records for {domain}")
    # verification, SPF, DKIM, return path, DMARC
    assert records.get_by_role("listitem").count() == 5
    assert "v=spf1" in records.inner_text() and "v=DKIM1" in records.inner_text()
    assert "rua=mailto:dmarc+" in records.inner_text()
    assert records.get_by_role("button", name=re.compile("Copy")).count() == 10
    console.shot("domains")
    page.get_by_role("button", name="Verify").click()
    page.locator(".badge.verified").wait_for()

    # An API credential: the key is shown once.
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Credentials").click()
    page.get_by_role("heading", name="Credentials", level=1).wait_for()
    page.get_by_role("textbox", name="Name", exact=True).fill("app")
    page.get_by_role("button", name="Create credential").click()
    key = page.locator(".once code").inner_text().strip()
    assert len(key) > 20
    console.shot("credentials")

    # A message sent over the API with that key appears with its status.
    sent = requests.post(f"{stack.base_url}/api/v2/server/messages", timeout=30,
                         headers={"X-Server-API-Key": key},
                         json={"from": f"App <app@{domain}>", "to": ["ann@example.net"],
                               "subject": "Welcome aboard", "text_body": "Hello"})
    assert sent.status_code == 201, sent.text
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Messages").click()
    page.get_by_role("heading", name="Messages", level=1).wait_for()
    for _ in range(60):  # the worker delivers to the scripted MX; reload until Sent
        row = page.get_by_role("row", name=re.compile("ann@example.net"))
        if row.count() and "Sent" in row.inner_text():
            break
        page.wait_for_timeout(250)
        page.reload()
        page.get_by_role("heading", name="Messages", level=1).wait_for()
    assert "Sent" in page.get_by_role("row", name=re.compile("ann@example.net")).inner_text()
    console.shot("messages")

    # Its page shows the delivery attempt with the SMTP reply.
    page.get_by_role("link", name="ann@example.net").click()
    page.get_by_role("heading", name="Welcome aboard", level=1).wait_for()
    attempts = page.get_by_role("table", name="Delivery attempts")
    assert "250" in attempts.inner_text()
    assert "MessageSent" in page.locator(".timeline").inner_text()
    page.get_by_role("button", name="Show raw source").click()
    page.locator("pre", has_text="Subject: Welcome aboard").wait_for()
    console.shot("message")

    # A webhook and its test send, with the receiver's answer shown.
    with Receiver([200]) as rx:
        page.get_by_role("navigation", name="Sections").get_by_role("link", name="Webhooks").click()
        page.get_by_role("heading", name="Webhooks", level=1).wait_for()
        page.get_by_label("URL").fill(rx.url)
        page.get_by_label("MessageSent").check()
        page.get_by_role("button", name="Create webhook").click()
        page.get_by_role("heading", name="Test send").wait_for()
        page.get_by_role("button", name="Send test").click()
        page.locator(".notice.success", has_text="Delivered: the endpoint answered HTTP 200").wait_for()
        assert rx.wait_for(1)[0].json()["test"] is True
        console.shot("webhook")

    # The overview draws the delivery chart with the sent message in it.
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Overview").click()
    page.get_by_role("heading", name="Production", level=1).wait_for()
    chart = page.locator("svg.chart").first
    chart.wait_for()
    assert page.locator("svg.chart rect.bar.sent").count() >= 1
    console.shot("overview")
