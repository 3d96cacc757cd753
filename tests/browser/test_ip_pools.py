"""The IP pools page in Chromium (issue 24.1): a pool without addresses or relay says its
mail waits, the relay host is set through the form, an address is added with its priority,
and a message sent through the pool shows the address it left from on its delivery attempt."""
from __future__ import annotations

from tests.browser.conftest import make_user
from tests.support import Api, make_tenant, unique, wait_for


def test_pool_page_warns_sets_the_relay_and_shows_the_source(console, api, stack, mx):
    admin = make_user(api, admin=True)
    tenant = make_tenant(api)
    name = unique("pool")
    empty = Api.data(api.post("/api/v2/admin/ip_pools", {"name": name}), 201)["ip_pool"]
    console.sign_in(admin["email_address"])
    console.open("/admin/ip-pools")
    card = console.page.locator("section.card", has=console.page.get_by_role("heading", name=name))
    card.get_by_text("has no address and no relay").wait_for()
    card.get_by_label("Relay host").fill("not a host")
    card.get_by_role("button", name="Save relay").click()
    card.get_by_text("is not host:port").wait_for()
    card.get_by_label("Relay host").fill("relay.internal:2526")
    card.get_by_role("button", name="Save relay").click()
    wait_for(lambda: Api.data(api.get(f"/api/v2/admin/ip_pools/{empty['id']}"))
             ["ip_pool"]["relay_host"] == "relay.internal:2526", message="the relay saved")
    # The page renders again: the warning goes, the relay stays in its field.
    card.get_by_text("has no address and no relay").wait_for(state="detached")
    card = console.page.locator("section.card", has=console.page.get_by_role("heading", name=name))
    assert card.get_by_label("Relay host").input_value() == "relay.internal:2526"
    console.shot("ip-pools-relay")
    Api.data(api.delete(f"/api/v2/admin/ip_pools/{empty['id']}"))

    name = unique("pool")
    sending = Api.data(api.post("/api/v2/admin/ip_pools", {"name": name}), 201)["ip_pool"]
    console.open("/admin/ip-pools")
    card = console.page.locator("section.card", has=console.page.get_by_role("heading", name=name))
    card.get_by_label("Hostname").fill("o2.console.test")
    card.get_by_label("IPv4").fill("127.0.0.2")
    card.get_by_label("Priority").fill("50")
    card.get_by_role("button", name="Add address").click()
    card.get_by_role("cell", name="o2.console.test").wait_for()
    [address] = Api.data(api.get(f"/api/v2/admin/ip_pools/{sending['id']}"))["ip_pool"]["ip_addresses"]
    assert (address["ipv4"], address["priority"]) == ("127.0.0.2", 50)
    Api.data(api.post(tenant.server_path + "/ip_pool", {"ip_pool_id": sending["id"]}))
    sent = Api.data(api.post("/api/v2/server/messages", {
        "from": f"app@{tenant.domain}", "to": ["pooled@example.net"], "subject": "Pooled",
        "text_body": "hi"}, server_key=tenant.api_key), 201)
    wait_for(lambda: mx.received_for("pooled@example.net"), message="delivery to the MX")
    console.open(f"/orgs/{tenant.org}/servers/{tenant.server}/messages/"
                 f"{sent['recipients'][0]['id']}")
    row = console.page.locator("table", has_text="SMTP reply").locator("tbody tr").first
    row.get_by_text(f"{mx.relay} from 127.0.0.2").wait_for()
    console.shot("message-delivery-from-pool")
