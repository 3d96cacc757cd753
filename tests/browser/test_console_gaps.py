"""The console's former gaps, each through the real API in a real browser: a webhook's custom
headers (add, keep, replace, remove), editing a route's endpoint, adding an existing account
to an organization, the SMTP host and ports beside a new SMTP credential, and dates in the
organization's time zone."""
from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import requests

from tests.browser.conftest import Console, make_user
from tests.receivers import Receiver
from tests.support import Api, make_tenant, unique

MASK = "••••••"


def _member_of(api: Api, tenant, role: str) -> dict:
    user = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"user_id": user["id"], "role": role}), 201)
    return user


def _not_offered(browser, console, user: dict, tenant, label: str) -> None:
    """``user``, signed in in a browser context of their own, finds no field ``label`` on
    the organization's page (their role cannot use it)."""
    other = Console(browser, console.base_url)
    try:
        other.sign_in(user["email_address"])
        page = other.open(f"/orgs/{tenant.org}")
        page.get_by_role("heading", name="Members").wait_for()
        assert page.get_by_label(label).count() == 0
        assert not other.errors, other.errors
    finally:
        other.close()


def _server_page(tenant, rest: str = "") -> str:
    return f"/orgs/{tenant.org}/servers/{tenant.server}{rest}"


def test_webhook_custom_headers_are_added_kept_replaced_and_removed(console, api):
    tenant = make_tenant(api)
    member = _member_of(api, tenant, "member")
    console.sign_in(member["email_address"])
    page = console.open(_server_page(tenant, "/webhooks"))
    page.get_by_role("heading", name="Webhooks", level=1).wait_for()
    with Receiver([200]) as rx:
        page.get_by_label("URL").fill(rx.url)
        page.get_by_role("button", name="Add header").click()
        page.get_by_label("Header name 1").fill("X-Shared-Secret")
        page.get_by_label("Header value 1").fill("s3cret-value")
        page.get_by_role("button", name="Add header").click()
        page.get_by_label("Header name 2").fill("Bad Name")
        page.get_by_label("Header value 2").fill("x")
        page.get_by_role("button", name="Create webhook").click()
        # The API's refusal shows beside the headers, and nothing was created.
        error = page.locator(".field-error", has_text="not a valid header name")
        error.wait_for()
        console.shot("gaps-webhook-header-error")
        assert not Api.data(api.get(tenant.server_path + "/webhooks"))["webhooks"]
        page.get_by_role("button", name=re.compile(r"^Remove row 2")).click()
        page.get_by_role("button", name="Create webhook").click()
        page.get_by_role("heading", name="Test send").wait_for()
        hook_id = int(page.url.rsplit("/", 1)[1])
        path = tenant.server_path + f"/webhooks/{hook_id}"
        assert Api.data(api.get(path))["webhook"]["headers"] == {"X-Shared-Secret": MASK}
        page.get_by_role("button", name="Send test").click()
        page.locator(".notice.success", has_text="Delivered: the endpoint answered HTTP 200").wait_for()
        assert rx.wait_for(1)[0].headers["x-shared-secret"] == "s3cret-value"

        # Editing: the stored value is never shown; an empty box keeps it, a new row adds.
        assert page.get_by_label("Header name 1").input_value() == "X-Shared-Secret"
        assert page.get_by_label("Header value 1").input_value() == ""
        page.get_by_role("button", name="Add header").click()
        page.get_by_label("Header name 2").fill("X-Tenant")
        page.get_by_label("Header value 2").fill("acme")
        page.get_by_role("button", name="Save changes").click()
        page.locator("dd", has_text="X-Shared-Secret, X-Tenant").wait_for()
        console.shot("gaps-webhook-headers")
        page.get_by_role("button", name="Send test").click()
        page.locator(".notice.success", has_text="Delivered: the endpoint answered HTTP 200").wait_for()
        second = rx.wait_for(2)[1].headers
        assert second["x-shared-secret"] == "s3cret-value" and second["x-tenant"] == "acme"

        # A renamed header needs its value again: said beside the field, nothing sent.
        page.get_by_label("Header name 2").fill("X-Team")
        page.get_by_role("button", name="Save changes").click()
        page.locator(".field-error", has_text="enter the value again").wait_for()
        assert set(Api.data(api.get(path))["webhook"]["headers"]) == {"X-Shared-Secret", "X-Tenant"}
        # Replace the secret, drop the other header.
        page.get_by_label("Header value 1").fill("rotated")
        page.get_by_role("button", name=re.compile(r"^Remove row 2")).click()
        page.get_by_role("button", name="Save changes").click()
        page.locator("dd", has_text=re.compile(r"^X-Shared-Secret$")).wait_for()
        page.get_by_role("button", name="Send test").click()
        page.locator(".notice.success", has_text="Delivered: the endpoint answered HTTP 200").wait_for()
        third = rx.wait_for(3)[2].headers
        assert third["x-shared-secret"] == "rotated" and "x-tenant" not in third


def test_a_routes_endpoint_is_edited(console, api):
    tenant = make_tenant(api)
    member = _member_of(api, tenant, "member")
    route = Api.data(api.post(tenant.server_path + "/routes", {
        "name": "support", "domain": tenant.domain, "mode": "endpoint",
        "endpoint": {"type": "http", "url": "https://old.example.com/in", "format": "json"}}),
        201)["route"]
    console.sign_in(member["email_address"])
    page = console.open(_server_page(tenant, "/routes"))
    page.get_by_role("link", name=f"Edit support@{tenant.domain}").click()
    page.get_by_role("heading", name=f"support@{tenant.domain}", level=1).wait_for()
    target = page.get_by_label("Endpoint (URL, host:port or address)")
    assert target.input_value() == "https://old.example.com/in"
    # A bad value: the API's message shows at the endpoint box; the route is unchanged.
    page.get_by_label("Endpoint type").select_option("smtp")
    target.fill("relay.example.com:99999")
    page.get_by_role("button", name="Save changes").click()
    page.locator(".field-error", has_text="between 1 and 65535").wait_for()
    path = tenant.server_path + f"/routes/{route['id']}"
    assert Api.data(api.get(path))["route"]["endpoint"]["url"] == "https://old.example.com/in"
    console.shot("gaps-route-error")
    target.fill("relay.example.com:2525")
    page.get_by_role("button", name="Save changes").click()
    page.get_by_role("heading", name="Routes", level=1).wait_for()
    assert page.get_by_role("row", name=re.compile("support@")).get_by_text(
        "SMTP → relay.example.com:2525").count() == 1
    assert Api.data(api.get(path))["route"]["endpoint"] == {
        "type": "smtp", "host": "relay.example.com", "port": 2525}
    console.shot("gaps-routes")
    # The mode needs an endpoint: emptying the box is refused beside it.
    page.get_by_role("link", name=f"Edit support@{tenant.domain}").click()
    page.get_by_role("heading", name=f"support@{tenant.domain}", level=1).wait_for()
    page.get_by_label("Endpoint (URL, host:port or address)").fill("")
    page.get_by_role("button", name="Save changes").click()
    page.locator(".field-error", has_text="endpoint is required").wait_for()
    # Held mail needs none: the mode and the endpoint change together.
    page.get_by_label("Mode").select_option("hold")
    page.get_by_role("button", name="Save changes").click()
    page.get_by_role("heading", name="Routes", level=1).wait_for()
    changed = Api.data(api.get(path))["route"]
    assert changed["mode"] == "hold" and changed["endpoint"] is None


def test_an_owner_adds_an_existing_account_by_email(console, browser, api):
    tenant = make_tenant(api)
    owner = _member_of(api, tenant, "owner")
    colleague = make_user(api)
    console.sign_in(owner["email_address"])
    page = console.open(f"/orgs/{tenant.org}")
    adding = page.locator("form", has=page.get_by_label("Account email"))
    adding.get_by_label("Account email").fill(f"{unique('nobody')}@example.com")
    adding.get_by_role("button", name="Add member").click()
    adding.locator(".field-error", has_text="no such account; invite the address instead").wait_for()
    console.shot("gaps-add-member-error")
    adding.get_by_label("Account email").fill(colleague["email_address"])
    adding.get_by_label("Role").select_option("viewer")
    adding.get_by_role("button", name="Add member").click()
    row = page.get_by_role("row", name=re.compile(re.escape(colleague["email_address"])))
    row.wait_for()
    members = Api.data(api.get(f"/api/v2/admin/organizations/{tenant.org}/members"))["members"]
    assert {m["email_address"]: m["role"] for m in members}[colleague["email_address"]] == "viewer"
    console.shot("gaps-add-member")
    # Adding the same account again is refused beside the address.
    adding = page.locator("form", has=page.get_by_label("Account email"))
    adding.get_by_label("Account email").fill(colleague["email_address"])
    adding.get_by_role("button", name="Add member").click()
    adding.locator(".field-error", has_text="already a member").wait_for()
    # The viewer (no members.manage) is not offered the form.
    _not_offered(browser, console, colleague, tenant, "Account email")


def test_a_new_smtp_credential_shows_host_and_ports(console, api, monkeypatch):
    monkeypatch.setenv("SMTP_SUBMISSION_PORTS", "587")
    monkeypatch.setenv("SMTP_TLS_PORT", "465")
    tenant = make_tenant(api)
    admin = _member_of(api, tenant, "admin")
    console.sign_in(admin["email_address"])
    page = console.open(_server_page(tenant, "/credentials"))
    page.get_by_label("Type").select_option("SMTP")
    page.get_by_role("textbox", name="Name", exact=True).fill("mail client")
    page.get_by_role("button", name="Create credential").click()
    settings = page.get_by_role("region", name="SMTP settings")
    settings.wait_for()
    text = settings.inner_text()
    options = Api.data(api.get("/api/v2/auth/options"))["options"]["smtp"]
    assert options["host"] in text and "mx.service.test" in text
    for port in options["starttls_ports"]:
        assert f"{port} — STARTTLS" in text
    assert "587 — STARTTLS (submission, recommended)" in text
    assert "465 — implicit TLS" in text and "only after STARTTLS" in text
    assert page.locator(".once code").inner_text().strip()  # the key, shown once, above
    console.shot("gaps-smtp-credential")
    # An API key needs no SMTP settings.
    page.get_by_label("Type").select_option("API")
    page.get_by_role("textbox", name="Name", exact=True).fill("app")
    page.get_by_role("button", name="Create credential").click()
    page.locator(".once", has_text='API key "app"').wait_for()
    assert page.get_by_role("region", name="SMTP settings").count() == 0


def test_server_pages_show_dates_in_the_organizations_time_zone(console, api, stack, mx):
    org = Api.data(api.post("/api/v2/admin/organizations", {
        "name": unique("Zoned"), "time_zone": "Asia/Kolkata"}), 201)["organization"]
    srv = Api.data(api.post(f"/api/v2/admin/organizations/{org['permalink']}/servers",
                            {"name": "Main"}), 201)["server"]
    base = f"/api/v2/admin/organizations/{org['permalink']}/servers/{srv['permalink']}"
    domain = f"{unique('tz')}.example.com"
    Api.data(api.post(base + "/domains", {"name": domain}), 201)
    Api.data(api.post(base + f"/domains/{domain}/verify"))
    key = Api.data(api.post(base + "/credentials", {"type": "API", "name": "api"}),
                   201)["credential"]["key"]
    sent = requests.post(f"{stack.base_url}/api/v2/server/messages", timeout=30,
                         headers={"X-Server-API-Key": key},
                         json={"from": f"app@{domain}", "to": ["zoe@example.net"],
                               "subject": "Zoned", "text_body": "Hi"})
    assert sent.status_code == 201, sent.text
    message_id = sent.json()["data"]["recipients"][0]["id"]
    admin = make_user(api, admin=True)
    console.sign_in(admin["email_address"])
    page = console.open(f"/orgs/{org['permalink']}/servers/{srv['permalink']}/messages")
    row = page.get_by_role("row", name=re.compile("zoe@example.net"))
    row.wait_for()
    created = Api.data(api.get(f"/api/v2/server/messages/{message_id}",
                               server_key=key))["message"]["created_at"]
    local = datetime.fromisoformat(created.replace("Z", "+00:00")).astimezone(
        ZoneInfo("Asia/Kolkata"))
    cell = row.inner_text()
    # Named (GMT+5:30) and converted: the wall-clock hour and minute are Kolkata's.
    assert "GMT+5:30" in cell, cell
    hour = local.strftime("%I") if re.search(r"\b[AP]M\b", cell) else local.strftime("%H")
    assert f"{hour}:{local:%M}:{local:%S}" in cell, (cell, local)
    assert "Times in Asia/Kolkata" in page.locator("#side").inner_text()
    console.shot("gaps-messages-zoned")
    # The chart's hour buckets are labelled in Kolkata time (UTC hours start at :30 there);
    # day buckets are UTC days and say so.
    server_page = f"/orgs/{org['permalink']}/servers/{srv['permalink']}"
    page = console.open(server_page)
    labels = page.locator("svg.chart text.axis[text-anchor='middle']")
    labels.first.wait_for()
    assert all(t.endswith((":30", ":30 AM", ":30 PM")) for t in labels.all_text_contents()), \
        labels.all_text_contents()
    page = console.open(server_page + "?range=7d")
    page.get_by_text("One bar per UTC day.").first.wait_for()  # deliveries, opens and clicks
    console.shot("gaps-overview-zoned-7d")
    # An account-level page keeps the browser's zone and says nothing about one.
    page = console.open("/account")
    page.get_by_role("heading", name="Your account", level=1).wait_for()
    assert "Times in" not in page.locator("body").inner_text()


def test_an_admin_renames_the_organization_and_changes_its_time_zone(console, browser, api):
    tenant = make_tenant(api)
    admin = _member_of(api, tenant, "admin")
    console.sign_in(admin["email_address"])
    page = console.open(f"/orgs/{tenant.org}")
    settings = page.locator("form", has=page.get_by_label("Time zone"))
    settings.get_by_label("Organization name").fill("Renamed Inc.")
    settings.get_by_label("Time zone").select_option("America/New_York")
    settings.get_by_role("button", name="Save settings").click()
    page.get_by_role("heading", name="Renamed Inc.", level=1).wait_for()
    page.locator("#side", has_text="Times in America/New_York").wait_for()
    org = Api.data(api.get(f"/api/v2/admin/organizations/{tenant.org}"))["organization"]
    assert (org["name"], org["time_zone"]) == ("Renamed Inc.", "America/New_York")
    console.shot("org-settings")
    # A member (no organization.update) is not offered the form.
    _not_offered(browser, console, _member_of(api, tenant, "member"), tenant, "Time zone")


def test_the_template_preview_follows_unsaved_text(console, api):
    tenant = make_tenant(api)
    Api.data(api.post("/api/v2/server/templates", {
        "name": "Welcome", "permalink": "welcome", "subject": "Hi {{name}}",
        "text_body": "Saved text for {{name}}", "html_body": "<p>Saved {{name}}</p>"},
        server_key=tenant.api_key), 201)
    member = _member_of(api, tenant, "member")
    console.sign_in(member["email_address"])
    page = console.open(_server_page(tenant, "/templates/welcome"))
    page.locator("pre", has_text="Saved text for Ada").wait_for()
    page.get_by_label("Text body").fill("Draft for {{name}} <b>")
    page.locator("pre", has_text="Draft for Ada <b>").wait_for()  # rendered, not yet saved
    saved = Api.data(api.get("/api/v2/server/templates/welcome",
                             server_key=tenant.api_key))["template"]
    assert saved["text_body"] == "Saved text for {{name}}"
    page.get_by_label("Text body").fill("Broken {{#open}}")
    page.get_by_text("text_body: line 1, column 8: unclosed section").wait_for()
    page.get_by_label("Text body").fill("Final for {{name}}")
    page.get_by_role("button", name="Save template").click()
    page.get_by_text("Saved.").wait_for()
    console.shot("template-preview-unsaved")
    assert Api.data(api.get("/api/v2/server/templates/welcome", server_key=tenant.api_key))[
        "template"]["text_body"] == "Final for {{name}}"
