"""The IP pools page in Chromium. Issue 24.1: a pool without addresses or relay says its
mail waits, the relay host is set through the form, an address is added with its priority,
and a message sent through the pool shows the address it left from on its delivery attempt.
Issue 24.2: each address's reverse DNS (whether it was checked, its problems and what to do
about them), and a Check button that looks it up again through the stack's DNS (a loopback
DNS server here)."""
from __future__ import annotations

from tests.browser.conftest import make_user
from tests.dns_helpers import fq
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


def test_the_pool_page_shows_reverse_dns_and_checks_again(console, api, dns_zone):
    admin = make_user(api, admin=True)
    pool = Api.data(api.post("/api/v2/admin/ip_pools", {"name": unique("pool")}), 201)["ip_pool"]
    good, bare = f"{unique('mta')}.pool.example", f"{unique('mta')}.pool.example"
    dns_zone.zone[(fq("7.0.0.127.in-addr.arpa"), "PTR")] = [fq(good)]
    dns_zone.zone[(fq(good), "A")] = ["127.0.0.7"]
    addresses = "/api/v2/admin/ip_pools/{}/ip_addresses".format(pool["id"])
    first = Api.data(api.post(addresses, {"ipv4": "127.0.0.7", "hostname": good}), 201)
    second = Api.data(api.post(addresses, {"ipv4": "127.0.0.8", "hostname": bare}), 201)
    Api.data(api.get(f"{addresses}/{first['ip_address']['id']}/check"))
    Api.data(api.get(f"{addresses}/{second['ip_address']['id']}/check"))

    console.sign_in(admin["email_address"])
    page = console.open("/admin/ip-pools")
    card = page.locator("section.card", has=page.get_by_role("heading", name=pool["name"]))
    addresses_table = card.locator("table").first
    row_good = addresses_table.locator("tr", has_text=good)
    row_bare = addresses_table.locator("tr", has_text=bare)
    row_good.get_by_text("ok", exact=True).wait_for()
    row_bare.get_by_text("3 problems").wait_for()
    problems = card.locator("table").nth(1)
    assert problems.locator("tbody tr").count() == 3
    assert "8.0.0.127.in-addr.arpa" in problems.locator("tr", has_text="PTR record").inner_text()
    console.shot("admin-ip-pools-reverse-dns")

    # The owner of 127.0.0.8 publishes its PTR record; Check looks it up again.
    dns_zone.zone[(fq("8.0.0.127.in-addr.arpa"), "PTR")] = [fq(bare)]
    dns_zone.zone[(fq(bare), "A")] = ["127.0.0.8"]
    row_bare.get_by_role("button", name="Check").click()
    row_bare.get_by_text("ok", exact=True).wait_for()
    assert card.locator("table").count() == 1  # no problem left to list
    console.shot("admin-ip-pools-reverse-dns-fixed")
