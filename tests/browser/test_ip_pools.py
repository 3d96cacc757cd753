"""The IP pool page shows each sending address's reverse DNS (issue 24, item 2): whether it was
checked, its problems and what to do about them, and a Check button that looks it up again
through the stack's DNS (a loopback DNS server here)."""
from __future__ import annotations

from tests.browser.conftest import make_user
from tests.dns_helpers import dns_zone, fq  # noqa: F401
from tests.support import Api, unique


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
