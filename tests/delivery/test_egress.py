"""How delivery connects, checked from the receiving side on loopback: the MX host's address is
resolved through DNS_RESOLVERS (a zone where it alone exists) and dialled (issue 23.5); an IP
pool chooses the source address and the greeting name (issue 24.1): pools with 127.0.0.2 and
127.0.0.3, the default pool, priorities, IPv6, DELIVERY_RELAY, a pool that cannot send from
here, the pool's relay_host."""
from __future__ import annotations

import random
import socket

import pytest

from chalicelib.services.delivery import egress
from tests.mx import ScriptedMX
from tests.support.sending import sent_ok, wait_status
from tests.support import Api, unique
from tests.support.egress import assign, pool, to
from tests.support.egress import ADMIN











def deliver(api, tenant, address, status="Sent") -> dict:
    [r] = sent_ok(api, tenant, to=[address])["recipients"]
    shown = wait_status(api, tenant, r["id"], status)
    return shown["deliveries"][-1] if status != "Sent" else shown["deliveries"][0]


def test_mx_host_known_only_to_the_configured_resolvers_is_reached(api, tenant, mx_zone):
    """Issue 23.5: the MX host exists only in the loopback zone; the system resolver has
    never heard of it, so a connection by name failed with gaierror."""
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(f"mx.{mx_zone.domain}", 25)
    address = to(mx_zone)
    attempt = deliver(api, tenant, address)
    assert attempt["host"] == f"mx.{mx_zone.domain}:{mx_zone.port}"
    assert attempt["source_address"] is None and attempt["mta_sts"] is None
    [received] = mx_zone.received_for(address)
    assert received.helo == "mx.service.test"  # SMTP_HOSTNAME: no pool


def test_each_pool_sends_from_its_address_with_its_name(api, mx_zone):
    first, second = make_two_tenants(api)
    pool_a = pool(api, {"ipv4": "127.0.0.2", "hostname": "o2.pool-a.test"})
    pool_b = pool(api, {"ipv4": "127.0.0.3", "hostname": "o3.pool-b.test"})
    assign(api, first, pool_a["id"])
    assign(api, second, pool_b["id"])
    a, b = to(mx_zone, "a"), to(mx_zone, "b")
    attempt_a, attempt_b = deliver(api, first, a), deliver(api, second, b)
    [got_a], [got_b] = mx_zone.received_for(a), mx_zone.received_for(b)
    assert (got_a.peer, got_a.helo) == ("127.0.0.2", "o2.pool-a.test")
    assert (got_b.peer, got_b.helo) == ("127.0.0.3", "o3.pool-b.test")
    assert attempt_a["source_address"] == "127.0.0.2"
    assert attempt_b["source_address"] == "127.0.0.3"


def make_two_tenants(api):
    from tests.support import make_tenant

    return make_tenant(api), make_tenant(api)


def test_the_default_pool_sends_for_servers_without_one(api, tenant, mx_zone):
    assign(api, tenant, None)
    default = pool(api, {"ipv4": "127.0.0.3", "hostname": "o3.default.test"}, default=True)
    try:
        address = to(mx_zone, "default")
        assert deliver(api, tenant, address)["source_address"] == "127.0.0.3"
        [got] = mx_zone.received_for(address)
        assert (got.peer, got.helo) == ("127.0.0.3", "o3.default.test")
    finally:
        Api.data(api.delete(f"{ADMIN}/ip_pools/{default['id']}"))


def test_behind_one_to_one_nat_the_local_address_is_bound_for_the_public_one(
        api, tenant, mx_zone, monkeypatch):
    """An EC2 instance sees the private address its Elastic IP maps to, never the EIP."""
    monkeypatch.setenv("IP_POOL_BIND_ADDRESSES", "198.51.100.9=127.0.0.2")
    nat = pool(api, {"ipv4": "198.51.100.9", "hostname": "eip.nat.test"})
    assign(api, tenant, nat["id"])
    address = to(mx_zone, "nat")
    assert deliver(api, tenant, address)["source_address"] == "198.51.100.9"
    [got] = mx_zone.received_for(address)
    assert (got.peer, got.helo) == ("127.0.0.2", "eip.nat.test")


def test_priority_zero_is_a_standby(api, tenant, mx_zone):
    chosen = pool(api, {"ipv4": "127.0.0.2", "hostname": "standby.test", "priority": 0},
                  {"ipv4": "127.0.0.3", "hostname": "main.test", "priority": 100})
    assign(api, tenant, chosen["id"])
    addresses = [to(mx_zone, f"p{n}") for n in range(3)]
    for address in addresses:
        deliver(api, tenant, address)
    assert {(m.peer, m.helo) for m in mx_zone.messages} == {("127.0.0.3", "main.test")}


def test_priorities_weigh_the_choice():
    items = [("a", 300), ("b", 100), ("zero", 0)]
    rng = random.Random(7)
    firsts = [egress.weighted_order(items, lambda i: i[1], rng)[0][0] for _ in range(4000)]
    share = firsts.count("a") / len(firsts)
    assert 0.70 < share < 0.80 and "zero" not in firsts  # 300 of 400
    assert egress.weighted_order(items, lambda i: i[1], rng)[-1][0] == "zero"


def test_delivery_relay_is_reached_from_the_pool_address(api, tenant, mx, monkeypatch):
    relay_pool = pool(api, {"ipv4": "127.0.0.2", "hostname": "o2.relay.test"})
    assign(api, tenant, relay_pool["id"])
    address = f"{unique('relay')}@recipient.example"
    attempt = deliver(api, tenant, address)
    [got] = mx.received_for(address)
    assert (got.peer, got.helo) == ("127.0.0.2", "o2.relay.test")
    assert attempt["host"] == mx.relay and attempt["source_address"] == "127.0.0.2"


@pytest.mark.parametrize("addresses, needle", [
    ([{"ipv4": "198.51.100.7", "hostname": "far.test"}],
     "none of IP pool {name}'s addresses (198.51.100.7) is an address of this host and the "
     "pool has no relay_host"),
    ([], "IP pool {name} has no addresses and the pool has no relay_host"),
])
def test_a_pool_that_cannot_send_from_here_defers_with_the_reason(api, tenant, mx_zone,
                                                                   addresses, needle):
    stuck = pool(api, *addresses)
    assign(api, tenant, stuck["id"])
    attempt = deliver(api, tenant, to(mx_zone, "stuck"), status="SoftFail")
    assert needle.format(name=stuck["name"]) in attempt["details"]
    assert attempt["status"] == "SoftFail" and attempt["host"] is None
    assert mx_zone.messages == [] and mx_zone.connections == 0


def test_an_mx_reached_only_over_ipv4_needs_an_ipv4_pool_address(api, tenant, mx_zone):
    v6only = pool(api, {"ipv6": "::1", "hostname": "v6only.test"})
    assign(api, tenant, v6only["id"])
    attempt = deliver(api, tenant, to(mx_zone, "v4"), status="SoftFail")
    assert f"IP pool {v6only['name']} has no IPv4 address to reach mx." in attempt["details"]
    assert mx_zone.connections == 0


@pytest.mark.parametrize("listed, bind_map", [
    ("::1", ""),
    ("2001:DB8:0::9", "2001:db8::9=::1"),  # behind NAT, the pool's spelling differs
])
def test_an_mx_reached_over_ipv6_is_dialled_from_the_pool_ipv6_address(
        api, tenant, dns_zone, monkeypatch, listed, bind_map):  # noqa: F811
    server = ScriptedMX(host="::1").start()
    try:
        monkeypatch.setenv("IP_POOL_BIND_ADDRESSES", bind_map)
        monkeypatch.delenv("DELIVERY_RELAY", raising=False)
        monkeypatch.setenv("DELIVERY_MX_PORT", str(server.port))
        domain = f"{unique('v6')}.example"
        dns_zone.zone.update({(f"{domain}.", "MX"): [(10, f"mx.{domain}.")],
                              (f"mx.{domain}.", "AAAA"): ["::1"]})
        both = pool(api, {"ipv4": "127.0.0.2", "ipv6": listed, "hostname": "dual.pool.test"})
        assign(api, tenant, both["id"])
        address = f"{unique('six')}@{domain}"
        attempt = deliver(api, tenant, address)
        [got] = server.received_for(address)
        assert (got.peer, got.helo) == ("::1", "dual.pool.test")
        assert attempt["source_address"] == listed
    finally:
        server.stop()


def test_a_pool_without_a_usable_address_hands_its_mail_to_its_relay(api, tenant, mx_zone):
    relay = ScriptedMX().start()
    try:
        far = pool(api, {"ipv4": "198.51.100.7", "hostname": "far.test"},
                   relay_host=relay.relay)
        assign(api, tenant, far["id"])
        address = to(mx_zone, "via")
        attempt = deliver(api, tenant, address)
        [got] = relay.received_for(address)
        assert got.peer == "127.0.0.1" and got.helo == "mx.service.test"  # nothing bound
        assert attempt["host"] == relay.relay and attempt["source_address"] is None
        assert mx_zone.messages == []
    finally:
        relay.stop()


def test_ip_pool_egress_relay_always_uses_the_relay(api, tenant, mx_zone, monkeypatch):
    monkeypatch.setenv("IP_POOL_EGRESS", "relay")
    owned = pool(api, {"ipv4": "127.0.0.2", "hostname": "o2.test"})
    assign(api, tenant, owned["id"])
    attempt = deliver(api, tenant, to(mx_zone, "norelay"), status="SoftFail")
    assert f"IP pool {owned['name']} has no relay_host" in attempt["details"]
    assert mx_zone.connections == 0


def test_ip_pool_relay_host_is_validated_and_changeable(api):
    created = pool(api, relay_host="relay.internal")
    assert created["relay_host"] == "relay.internal:25"
    path = f"{ADMIN}/ip_pools/{created['id']}"
    changed = Api.data(api.patch(path, {"relay_host": "[2001:db8::5]:2526"}))["ip_pool"]
    assert changed["relay_host"] == "[2001:db8::5]:2526"
    for bad in ("not a host:25", "relay.internal:0", "relay.internal:port"):
        error = Api.error(api.patch(path, {"relay_host": bad}), 422, "ValidationError")
        assert "relay_host" in error["message"]
    Api.error(api.post(f"{ADMIN}/ip_pools", {"name": unique("p"), "relay_host": "x y"}), 422,
              "ValidationError")
    Api.error(api.patch(path, {"name": None}), 422, "ValidationError")
    cleared = Api.data(api.patch(path, {"relay_host": None, "name": "renamed-" + unique()}))
    assert cleared["ip_pool"]["relay_host"] is None
    assert cleared["ip_pool"]["name"].startswith("renamed-")
    Api.data(api.delete(path))


def test_the_pool_relay_is_given_longer_to_answer_than_an_mx(monkeypatch, stack):
    """The relay answers DATA only after its own onward conversation: the worker waits
    RELAY_WAIT_FACTOR times DELIVERY_TIMEOUT_SECONDS for it."""
    from chalicelib.services.delivery import connect

    monkeypatch.setenv("DELIVERY_TIMEOUT_SECONDS", "7")
    server = ScriptedMX().start()
    try:
        relayed = egress.Egress("p", relay=("127.0.0.1", server.port))
        for path, expected in ((relayed, 7 * connect.RELAY_WAIT_FACTOR), (egress.DIRECT, 7)):
            session = connect.open_session("127.0.0.1", server.port, egress=path,
                                           tls_mode=connect.OPPORTUNISTIC, domain="x.example")
            assert session.smtp.sock.gettimeout() == expected
            session.smtp.quit()
    finally:
        server.stop()
