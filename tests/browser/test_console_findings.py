"""The console findings of issue 23 item 7, each through the real API in a real browser:
errors in the form's words beside the field's label; every DNS record of a domain with copy
buttons; a webhook test send's result in words (never a bare `null`); suppressions with their
typed details, stream, import and export; a message's size equal to its raw source's, and its
opens and clicks in its timeline; the getting-started list until every step is done; one date
format; the status filter grouped and explained; the IP range only for SMTP-IP credentials.
(The first visit landing on set-up is tests/browser/test_a_first_run.py; the `make run`
banner, tests/local/test_startup.py.)"""
from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import requests

from chalicelib import clock
from chalicelib.console import rules as console_rules
from tests.browser.conftest import make_user
from tests.receivers import Receiver, Reply
from tests.support import Api, make_tenant, unique, wait_for
from tests.support.tracking import html_and_text, tracking_urls

BROWSER = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 Version/17.5"
# How every page writes a date: `Nov 26, 2026, 06:50:26 AM UTC` (en-US, the zone named).
DATE = re.compile(r"^[A-Z][a-z]{2} \d{1,2}, \d{4}, \d{2}:\d{2}:\d{2}\s[AP]M \S+$")


def _server(tenant, rest: str = "") -> str:
    return f"/orgs/{tenant.org}/servers/{tenant.server}{rest}"


def _admin(console, api):
    admin = make_user(api, admin=True)
    console.sign_in(admin["email_address"])
    return admin


def _orgs(api) -> int:
    return Api.data(api.get("/api/v2/admin/organizations"))["pagination"]["total"]


def test_errors_read_like_the_form_beside_the_fields_label(console, api):
    _admin(console, api)
    page = console.page
    before = _orgs(api)
    name = page.get_by_label("Name")
    name.fill("   ")  # only spaces: refused here, nothing sent
    page.get_by_role("button", name="Create organization").click()
    page.locator(".field-error", has_text="Name is required.").wait_for()
    assert name.get_attribute("aria-invalid") == "true" and _orgs(api) == before
    name.fill("x" * 256)  # refused by the API, said as the form would
    page.get_by_role("button", name="Create organization").click()
    error = page.locator(".field-error", has_text="Name can be at most 255 characters.")
    error.wait_for()
    assert "String should" not in error.inner_text() and _orgs(api) == before
    console.shot("findings-error-wording")

    tenant = make_tenant(api)
    page = console.open(_server(tenant, "/domains"))
    page.get_by_label("Domain name").fill("not a domain")
    page.get_by_role("button", name="Add domain").click()
    error = page.locator(".field-error", has_text="is not a valid domain name")
    error.wait_for()
    assert error.inner_text() == "'not a domain' is not a valid domain name."

    # The navigation names the organization by its name, renamed or not (not its permalink).
    page = console.open(f"/orgs/{tenant.org}")
    page.get_by_label("Organization name").fill("  Renamed Co  ")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_role("heading", name="Renamed Co", level=1).wait_for()
    page = console.open(_server(tenant))
    page.locator("#side", has_text="← Renamed Co").wait_for()


def test_the_domain_page_shows_every_record_the_api_returns_with_copy_buttons(console, api):
    tenant = make_tenant(api)
    records = Api.data(api.get(f"{tenant.server_path}/domains/{tenant.domain}"))["domain"][
        "dns_records"]
    assert {"verification", "spf", "dkim", "return_path", "dmarc"} <= set(records)
    _admin(console, api)
    console.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = console.open(_server(tenant, "/domains"))
    shown = page.locator(".dns-record")
    shown.first.wait_for()
    # The DMARC report authorization is the operator's to publish (in the service's zone), so
    # it is a note under the list, not a record of the tenant's.
    operators = records.pop("dmarc_report_authorization")
    assert sorted(shown.evaluate_all("els => els.map(e => e.dataset.record)")) == sorted(records)
    assert page.get_by_text(f'{operators["name"]} TXT "{operators["value"]}"').count() == 1
    for key, record in records.items():
        item = page.locator(f".dns-record[data-record='{key}']")
        assert item.locator("h3 .badge").inner_text() == record["type"]
        codes = item.locator("code").all_inner_texts()
        assert codes == [record["name"], record["value"]], key
        assert item.get_by_role("button", name=re.compile("^Copy")).count() == 2
    item = page.locator(".dns-record[data-record='return_path']")
    item.get_by_role("button", name="Copy Return path record value").click()
    assert page.evaluate("navigator.clipboard.readText()") == records["return_path"]["value"]
    console.shot("findings-domain-records")


def test_a_webhook_test_sends_result_is_said_in_words(console, api):
    tenant = make_tenant(api)
    _admin(console, api)
    with Receiver([Reply(404, body="null"), Reply(500, body="boom")]) as rx:
        hook = Api.data(api.post(tenant.server_path + "/webhooks", {"url": rx.url}),
                        201)["webhook"]
        page = console.open(_server(tenant, f"/webhooks/{hook['id']}"))
        page.get_by_role("button", name="Send test").click()
        failed = page.locator(".notice.error", has_text="Failed: the endpoint answered HTTP 404")
        failed.wait_for()
        result = failed.locator("xpath=..")
        assert "The answer had no body." in result.inner_text()
        assert "null" not in result.inner_text()
        console.shot("findings-webhook-test")
        page.get_by_role("button", name="Send test").click()
        page.locator(".notice.error", has_text="HTTP 500").wait_for()
        page.locator("pre", has_text="boom").wait_for()


def test_suppressions_show_what_the_api_keeps_and_offer_what_it_offers(console, api):
    tenant = make_tenant(api)
    base = tenant.server_path + "/suppressions"
    stream = Api.data(api.post("/api/v2/server/streams", {"name": "News", "stream_type":
                                                          "broadcast"},
                               server_key=tenant.api_key), 201)["stream"]
    _admin(console, api)
    page = console.open(_server(tenant, "/suppressions"))
    adding = page.locator("section", has=page.get_by_role("heading", name="Suppress an address"))
    adding.get_by_label("Email address").fill("ann@example.net")
    adding.get_by_label("Reason").select_option("SpamComplaint")
    adding.get_by_label("Details").fill("asked us to stop")
    adding.get_by_label("Stream").select_option(stream["permalink"])
    adding.get_by_role("button", name="Suppress").click()
    row = page.get_by_role("row", name=re.compile("ann@example.net"))
    row.wait_for()
    assert ["ann@example.net", "SpamComplaint", "asked us to stop", "News"] == \
        row.locator("td").all_inner_texts()[:4]
    [entry] = Api.data(api.get(base))["suppressions"]
    assert (entry["reason"], entry["details"], entry["stream"]) == \
        ("SpamComplaint", "asked us to stop", stream["permalink"])

    # Import: typed lines and a CSV file (the export's columns), one bad line reported.
    page.get_by_label("Addresses").fill("bob@example.net\ncat@example.net,Unsubscribe\nnot-an-address")
    page.get_by_label("CSV file").set_input_files(files=[{
        "name": "more.csv", "mimeType": "text/csv",
        "buffer": b'address,reason,stream,origin,details\r\n"dan@example.net",Manual,,import,"a, b"\r\n'}])
    page.get_by_role("button", name="Import").click()
    page.locator(".import-result", has_text="Imported 3, skipped 1.").wait_for()
    page.locator(".import-result li", has_text="not-an-address").wait_for()
    listed = {s["address"]: s["reason"] for s in Api.data(api.get(base))["suppressions"]}
    assert listed == {"ann@example.net": "SpamComplaint", "bob@example.net": "Manual",
                      "cat@example.net": "Unsubscribe", "dan@example.net": "Manual"}
    console.shot("findings-suppressions")

    # Export: the CSV the API answers, with the page's filters.
    page = console.open(_server(tenant, "/suppressions?reason=Manual"))
    page.get_by_role("heading", name="Suppressions", level=1).wait_for()
    with page.expect_download() as download:
        page.get_by_role("button", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    assert sorted(r["address"] for r in rows) == ["bob@example.net", "dan@example.net"]

    # Removing one entry removes only that one (the address's stream entry).
    Api.data(api.post(base, {"address": "ann@example.net"}), 201)  # and one for every stream
    page = console.open(_server(tenant, "/suppressions?query=ann"))
    rows = page.get_by_role("row", name=re.compile("ann@example.net"))
    wait_for(lambda: rows.count() == 2, message="both of ann's entries")
    page.get_by_role("row", name=re.compile("News")).get_by_role("button", name="Remove").click()
    wait_for(lambda: rows.count() == 1, message="one entry left")
    [left] = Api.data(api.get(base + "?query=ann"))["suppressions"]
    assert left["stream"] is None


def test_a_message_shows_one_size_and_its_opens_and_clicks_in_its_timeline(console, api, mx,
                                                                          monkeypatch, stack):
    monkeypatch.setenv("PUBLIC_URL", stack.base_url)  # tracking URLs at the running stack
    tenant = make_tenant(api)
    to = f"{unique('r')}@recipient.example"
    result = Api.data(api.post("/api/v2/server/messages", {
        "from": f"app@{tenant.domain}", "to": [to], "subject": "Tracked",
        "html_body": '<p><a href="https://shop.example/item">Buy</a></p>', "text_body": "Buy"},
        server_key=tenant.api_key), 201)
    message_id = result["recipients"][0]["id"]
    received = wait_for(lambda: mx.received_for(to), 20, message="delivery")[0]
    clicks, pixels = tracking_urls(html_and_text(received.data)[0])
    clock.advance(timedelta(minutes=2))  # a person, not a prefetch right after delivery
    requests.get(pixels[0], headers={"User-Agent": BROWSER}, timeout=10)
    requests.get(clicks[0], headers={"User-Agent": BROWSER}, allow_redirects=False, timeout=10)
    raw = Api.data(api.get(f"/api/v2/server/messages/{message_id}/raw",
                           server_key=tenant.api_key))

    _admin(console, api)
    page = console.open(_server(tenant, f"/messages/{message_id}"))
    size = page.locator("dd", has_text=" bytes")
    size.wait_for()
    assert size.inner_text() == f"{raw['size']} bytes"
    page.get_by_role("button", name="Show raw source").click()
    page.get_by_text(f"{raw['size']} bytes, exactly as signed for delivery").wait_for()
    timeline = page.locator(".timeline li")
    titles = [t.split(" ", 1)[0] for t in timeline.all_inner_texts()]
    assert titles == ["MessageSent", "Opened", "Clicked"], titles
    assert "https://shop.example/item" in timeline.nth(2).inner_text()
    console.shot("findings-message-timeline")


def test_getting_started_stays_until_every_step_is_done(console, api, mx):
    tenant = make_tenant(api)  # a verified domain and credentials: three steps done
    _admin(console, api)
    overview = _server(tenant)

    def steps():
        page = console.open(overview)
        page.get_by_role("heading", name="Main", level=1).wait_for()
        page.locator(".stats").wait_for()
        items = page.locator(".steps li")
        return {"open": [t for t in items.all_inner_texts() if not t.startswith("✓")],
                "done": [t for t in items.all_inner_texts() if t.startswith("✓")]}

    assert [s.split(" over", 1)[0].split(" to hear")[0] for s in steps()["open"]] == \
        ["Send a first message", "Add a webhook"]
    console.shot("findings-getting-started")
    Api.data(api.post("/api/v2/server/messages", {
        "from": f"app@{tenant.domain}", "to": ["first@example.net"], "subject": "First",
        "text_body": "Hi"}, server_key=tenant.api_key), 201)
    now = steps()  # mail exists, but no webhook yet: the list stays
    assert len(now["open"]) == 1 and now["open"][0].startswith("Add a webhook")
    assert len(now["done"]) == 4
    with Receiver([200]) as rx:
        Api.data(api.post(tenant.server_path + "/webhooks", {"url": rx.url}), 201)
        page = console.open(overview)
        page.locator(".stats").wait_for()
        assert page.get_by_role("heading", name="Getting started").count() == 0


def test_dates_are_written_one_way_on_every_page(console, api):
    tenant = make_tenant(api)
    _admin(console, api)
    page = console.open("/account")
    cells = page.get_by_role("row").nth(1).locator("td")
    cells.first.wait_for()
    account_dates = [t for t in cells.all_inner_texts() if re.search(r"\d{4}", t)]
    page = console.open(_server(tenant, "/credentials"))
    row = page.get_by_role("row", name=re.compile("smtp"))
    row.wait_for()
    server_dates = [t for t in row.locator("td").all_inner_texts() if re.search(r"\d{4}", t)]
    assert account_dates and all(DATE.match(t) for t in account_dates + server_dates), \
        (account_dates, server_dates)


def test_the_status_filter_groups_and_explains_the_two_vocabularies(console, api):
    tables = console_rules.tables()
    tenant = make_tenant(api)
    _admin(console, api)
    page = console.open(_server(tenant, "/messages"))
    status = page.locator("#f-status")
    status.wait_for()
    groups = status.locator("optgroup").evaluate_all(
        "gs => gs.map(g => [g.label, [...g.children].map(o => o.value)])")
    either = [s for s in tables["OUTGOING_STATUSES"] if s in tables["INCOMING_STATUSES"]]
    assert groups == [
        ["Outgoing", [s for s in tables["OUTGOING_STATUSES"] if s not in either]],
        ["Incoming", [s for s in tables["INCOMING_STATUSES"] if s not in either]],
        ["Outgoing or incoming", either]]
    page.get_by_label("Direction").select_option("incoming")
    assert status.locator("option").all_inner_texts() == ["Any", *tables["INCOMING_STATUSES"]]
    page.get_by_text("What the statuses mean").click()
    meanings = page.locator("details.meanings")
    for text in (*tables["OUTGOING_MEANINGS"].values(), *tables["INCOMING_MEANINGS"].values()):
        assert text in meanings.inner_text()
    # Each status the filter offers is one the API takes (an inbound one included).
    page.get_by_label("Status").select_option("Accepted")
    page.get_by_role("button", name="Filter").click()
    page.get_by_text("No message matches these filters.").wait_for()
    console.shot("findings-status-filter")


def test_the_ip_range_is_offered_only_for_smtp_ip_credentials(console, api):
    tenant = make_tenant(api)
    _admin(console, api)
    page = console.open(_server(tenant, "/credentials"))
    ip_range = page.get_by_label("IP range")
    page.get_by_label("Type").wait_for()
    assert ip_range.is_hidden()
    page.get_by_label("Type").select_option("SMTP-IP")
    assert ip_range.is_visible()
    page.get_by_label("Type").select_option("SMTP")
    assert ip_range.is_hidden()
    page.get_by_label("Type").select_option("SMTP-IP")
    page.get_by_label("Name").fill("office")
    page.get_by_role("button", name="Create credential").click()
    page.locator(".field-error", has_text="IP range is required.").wait_for()
    ip_range.fill("192.0.2.0/24")
    page.get_by_role("button", name="Create credential").click()
    page.get_by_role("cell", name="192.0.2.0/24").wait_for()
    creds = Api.data(api.get(tenant.server_path + "/credentials"))["credentials"]
    assert [c["ip_range"] for c in creds if c["type"] == "SMTP-IP"] == ["192.0.2.0/24"]
