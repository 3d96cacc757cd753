"""Looking at mail in a real browser: the captured-mail inbox (search, a message read with its
HTML in the sandboxed frame and its inline image, the text part, an attachment downloaded,
the raw source, clearing), a sent message's page beside its raw source, the message list's
date range, and "Send a test" from the template editor landing in the inbox."""
from __future__ import annotations

from datetime import timedelta

from chalicelib import clock
from tests.support.captured import PIXEL, rich, submit
from tests.support.sending import rfc3339
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support import Api, make_tenant, wait_for
from tests.support.browser import member_of

FRAME = ".mail-frame iframe:not([hidden])"




def test_the_captured_inbox_reads_like_a_mail_catcher(console, stack, api, monkeypatch):
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", "")
    tenant = make_tenant(api)
    to = rcpt("inv")
    submit(stack, tenant, to, rich(tenant, to))
    [other] = sent_ok(api, tenant, to=[rcpt("plain")], subject="Plain words")["recipients"]
    wait_status(api, tenant, other["id"], "Sent")
    wait_for(lambda: Api.data(api.get("/api/v2/server/captured", server_key=tenant.api_key))
             ["pagination"]["total"] == 2, message="both captured")
    person = member_of(api, tenant)
    page = console.sign_in(person["email_address"])
    page.goto(f"{console.base_url}/orgs/{tenant.org}/servers/{tenant.server}/captured")
    page.get_by_role("heading", name="Captured mail", level=1).wait_for()
    page.get_by_role("cell", name="Plain words").wait_for()
    console.shot("captured-inbox")
    page.get_by_label("Search").fill("invoice")
    page.get_by_role("button", name="Search").click()
    page.get_by_role("cell", name="Plain words").wait_for(state="detached")
    page.get_by_role("link", name=to).click()
    page.get_by_role("heading", name="Your invoice", level=1).wait_for()
    frame = page.frame_locator(FRAME)
    frame.locator("p", has_text="Invoice").wait_for()
    styled = frame.locator("p")
    assert styled.evaluate("e => getComputedStyle(e).color") == "rgb(204, 0, 0)"
    image = frame.locator("img")
    assert image.get_attribute("src") == f"data:image/png;base64,{PIXEL}"
    assert "Invoice attached." in page.locator("pre.text-part").inner_text()
    with page.expect_download() as download:
        page.get_by_role("button", name="invoice.csv").click()
    assert open(download.value.path(), "rb").read() == b"item,amount\nwidget,3\n"
    assert download.value.suggested_filename == "invoice.csv"
    page.get_by_role("button", name="Show raw source").click()
    page.locator("pre.raw-source").wait_for()
    assert "DKIM-Signature:" in page.locator("pre.raw-source").inner_text()
    page.locator(FRAME).scroll_into_view_if_needed()
    console.shot("captured-message", full_page=False)

    page.get_by_role("link", name="← Captured mail").click()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Clear the inbox").click()
    page.get_by_text("No captured mail.").wait_for()
    # The messages themselves stay.
    assert Api.data(api.get(f"/api/v2/server/messages/{other['id']}",
                            server_key=tenant.api_key))["message"]["status"] == "Sent"


def test_a_sent_message_beside_its_raw_source_and_the_list_by_day(console, api, mx):
    tenant = make_tenant(api)
    [old] = sent_ok(api, tenant, subject="Last week", send_at=rfc3339(
        clock.now() + timedelta(days=30)))["recipients"]
    clock.advance(timedelta(days=3))
    [r] = sent_ok(api, tenant, subject="Welcome",
                  html_body='<h1 style="color: rgb(0, 128, 0)">Welcome</h1>',
                  text_body="Welcome aboard.")["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    person = member_of(api, tenant, "viewer")
    page = console.sign_in(person["email_address"])
    base = f"{console.base_url}/orgs/{tenant.org}/servers/{tenant.server}"
    page.goto(f"{base}/messages/{r['id']}")
    heading = page.frame_locator(FRAME).locator("h1", has_text="Welcome")
    heading.wait_for()
    assert heading.evaluate("e => getComputedStyle(e).color") == "rgb(0, 128, 0)"
    assert "Welcome aboard." in page.locator("pre.text-part").inner_text()
    page.get_by_role("button", name="Show raw source").click()
    page.locator("pre.raw-source").wait_for()
    assert "exactly as signed for delivery" in page.locator(".mail-view").inner_text()
    page.locator(FRAME).scroll_into_view_if_needed()
    console.shot("message-as-seen", full_page=False)

    today = clock.now().date().isoformat()
    page.goto(f"{base}/messages")
    page.get_by_role("link", name=old["rcpt_to"]).wait_for()
    page.get_by_label("From day").fill(today)
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("link", name=old["rcpt_to"]).wait_for(state="detached")
    page.get_by_role("link", name=r["rcpt_to"]).wait_for()
    assert f"from={today}" in page.url
    page.get_by_label("From day").fill("")
    page.get_by_label("Until day").fill((clock.now() - timedelta(days=1)).date().isoformat())
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("link", name=old["rcpt_to"]).wait_for()
    assert page.get_by_role("link", name=r["rcpt_to"]).count() == 0


def test_send_a_test_from_the_template_editor(console, api, monkeypatch):
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", "")
    tenant = make_tenant(api)
    template = Api.data(api.post("/api/v2/server/templates", {
        "name": "Welcome", "subject": "Hi {{ name }}", "html_body": "<p>Hello {{ name }}</p>",
        "text_body": "Hello {{ name }}"}, server_key=tenant.api_key), 201)["template"]
    person = member_of(api, tenant)
    page = console.sign_in(person["email_address"])
    page.goto(f"{console.base_url}/orgs/{tenant.org}/servers/{tenant.server}/templates/"
              f"{template['permalink']}")
    page.frame_locator(FRAME).locator("p", has_text="Hello Ada").wait_for()
    # Unsaved text is what the test sends, as the preview shows it.
    page.get_by_label("Subject").fill("Draft for {{ name }}")
    to = rcpt("me")
    page.get_by_label("Send a test to").fill(to)
    assert page.locator("input[name=from]").input_value() == f"test@{tenant.domain}"
    page.get_by_role("button", name="Send test").click()
    page.get_by_text(f"Test sent to {to}").wait_for()
    console.shot("template-send-test")
    [entry] = wait_for(lambda: Api.data(api.get("/api/v2/server/captured",
                                                server_key=tenant.api_key))["captured"],
                       message="the test in the captured inbox")
    assert (entry["rcpt_to"], entry["subject"]) == (to, "Draft for Ada")
    shown = Api.data(api.get(f"/api/v2/server/messages/{entry['message_id']}",
                             server_key=tenant.api_key))["message"]
    assert shown["tag"] == "template-test"
    page.get_by_label("Send a test to").fill("not an address")
    page.get_by_role("button", name="Send test").click()
    page.locator(".field-error:visible, .form-error:visible").first.wait_for()
