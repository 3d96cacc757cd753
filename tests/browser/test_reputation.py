"""The reputation guard and infrastructure signals in Chromium (issue 34, items 4 and 5): a
server the guard paused says so on its overview and settings, with the rates against the
thresholds; its owner is told that only an instance admin lifts the pause, and an instance
admin lifts it; a refusal that blamed a sending address shows on the domains page and on the
IP pools page with who said it and its words."""
from __future__ import annotations

from chalicelib.services.reputation import signals
from tests.browser.conftest import make_user
from tests.support.reputation import count, messages, outcomes, server_id
from tests.support import Api, all_tenants, make_tenant, unique

BLOCKED = "550 5.7.1 Client host [127.0.0.43] blocked using zen.spamhaus.org"


def test_a_paused_server_and_the_refusals_that_blamed_its_address(console, browser, api,
                                                                   monkeypatch):
    monkeypatch.setenv("REPUTATION_MIN_VOLUME", "100")
    tenant = make_tenant(api)
    sid = server_id(api, tenant)
    owner = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"user_id": owner["id"], "role": "owner"}), 201)
    pool = Api.data(api.post("/api/v2/admin/ip_pools", {"name": unique("pool")}), 201)["ip_pool"]
    Api.data(api.post(f"/api/v2/admin/ip_pools/{pool['id']}/ip_addresses",
                      {"ipv4": "127.0.0.43", "hostname": "o2.console.test"}), 201)
    domain = Api.data(api.get(f"{tenant.server_path}/domains/{tenant.domain}"))["domain"]
    [refused, *bounced] = messages(sid, 11)
    with all_tenants() as db:  # as delivery records one (tests/reputation/test_signals.py)
        signals.record(db, server_id=sid, blames="ip", reason="block_list", origin="delivery",
                       message_id=refused, domain_id=domain["id"], domain=tenant.domain,
                       ip_pool_id=pool["id"], source_address="127.0.0.43",
                       receiver="mx.recipient.example", code=550, status="5.7.1", text=BLOCKED)
    outcomes(sid, 100)
    for message_id in bounced[:10]:
        count(sid, message_id)

    base = f"/orgs/{tenant.org}/servers/{tenant.server}"
    console.sign_in(owner["email_address"])
    page = console.open(base)
    page.get_by_text("Sending paused by the reputation guard").wait_for()
    page.get_by_text("bounce rate (bounces saying the address is bad").first.wait_for()
    console.shot("server-paused-overview")
    page = console.open(base + "/settings")
    card = page.locator("section.card", has=page.get_by_role("heading", name="Reputation"))
    card.get_by_text("Paused", exact=True).wait_for()
    assert "10% · 10 bounces saying the address is bad, of 100 messages sent" in card.inner_text()
    page.get_by_text("Only an instance administrator can lift a pause").wait_for()
    assert page.get_by_role("button", name="Lift the pause").count() == 0
    console.shot("server-paused-settings")
    page = console.open(base + "/domains")
    page.get_by_text(f"1 refusal blamed {tenant.domain} in the last 24 hours").wait_for()
    row = page.locator("tr", has_text="mx.recipient.example")
    assert "block_list" in row.inner_text() and "zen.spamhaus.org" in row.inner_text()
    console.shot("domain-signals")

    from tests.browser.conftest import Console

    admin_user = make_user(api, admin=True)
    admin = Console(browser, console.base_url)
    try:
        admin.sign_in(admin_user["email_address"])
        page = admin.open("/admin/ip-pools")
        card = page.locator("section.card", has=page.get_by_role("heading", name=pool["name"]))
        card.locator("tr", has_text="o2.console.test").get_by_text("1 in 24 h").wait_for()
        card.get_by_text(f"1 refusal blamed the pool {pool['name']}").wait_for()
        assert "127.0.0.43" in card.locator("tr", has_text="mx.recipient.example").inner_text()
        admin.shot("admin-ip-pools-signals")
        page = admin.open(base + "/settings")
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Lift the pause").click()
        card = page.locator("section.card", has=page.get_by_role("heading", name="Reputation"))
        card.get_by_text("OK", exact=True).wait_for()
        assert "Last lifted" in card.inner_text()
        assert not Api.data(api.get(tenant.server_path))["server"]["suspended"]
        assert not admin.errors, admin.errors
    finally:
        Api.data(api.delete(f"/api/v2/admin/ip_pools/{pool['id']}"))
        admin.close()
