"""Data removal and expired content in a real browser: an organization admin removes a
recipient's data from the server's settings page and sees the counts; the message's page
then says its content expired instead of showing the mail."""
from __future__ import annotations

from tests.support.browser import member_of
from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support import Api, make_tenant


def test_an_admin_removes_a_recipients_data_from_the_console(console, stack, api, monkeypatch):
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", "")
    tenant = make_tenant(api)
    victim = rcpt("victim")
    [r] = sent_ok(api, tenant, to=[victim], subject="Private matters")["recipients"]
    wait_status(api, tenant, r["id"], "Sent")
    person = member_of(api, tenant, "admin")
    page = console.sign_in(person["email_address"])
    base = f"{console.base_url}/orgs/{tenant.org}/servers/{tenant.server}"
    page.goto(f"{base}/settings")
    page.get_by_role("heading", name="Remove a recipient’s data").wait_for()
    page.get_by_label("Email address").fill(victim)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove data").click()
    result = page.get_by_role("table", name="What was removed")
    result.wait_for()
    assert result.get_by_role("row", name="messages 1").count() == 1
    assert result.get_by_role("row", name="content erased 1").count() == 1
    console.shot("data-removal")
    assert Api.data(api.get(f"/api/v2/server/messages/{r['id']}",
                            server_key=tenant.api_key))["message"]["subject"] is None

    page.goto(f"{base}/messages/{r['id']}")
    page.get_by_text("Content expired").wait_for()
    assert page.get_by_role("button", name="Show raw source").count() == 0
