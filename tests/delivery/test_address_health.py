"""Sending-address health (issue 24, item 2): every address of every IP pool is checked for a
PTR record, forward confirmation (the PTR name resolves back to the address) and a HELO match
(the address's hostname is its PTR name), through a real DNS server on loopback that the
stack reaches through DNS_RESOLVERS, for in-addr.arpa and ip6.arpa alike; the result shows in
the address's record, the scheduled run re-checks it and logs what broke."""
from __future__ import annotations

import io
import json
from datetime import timedelta

from chalicelib import clock, observability
from chalicelib.services.delivery import address_health
from tests.dns_helpers import fq
from tests.support import Api, unique

V6 = "2001:db8:24::25"
V6_REVERSE = "5.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.4.2.0.0.8.b.d.0.1.0.0.2.ip6.arpa"


def _pool(api) -> dict:
    return Api.data(api.post("/api/v2/admin/ip_pools", {"name": unique("pool")}), 201)["ip_pool"]


def _address(api, pool, **fields) -> dict:
    return Api.data(api.post(f"/api/v2/admin/ip_pools/{pool['id']}/ip_addresses", fields),
                    201)["ip_address"]


def _check(api, pool, address) -> dict:
    return Api.data(api.get(f"/api/v2/admin/ip_pools/{pool['id']}/ip_addresses/"
                            f"{address['id']}/check"))["ip_address"]


def _shown(api, pool, address) -> dict:
    return Api.data(api.get(f"/api/v2/admin/ip_pools/{pool['id']}/ip_addresses/"
                            f"{address['id']}"))["ip_address"]


def _by(records: list[dict]) -> dict:
    return {(r["address"], r["kind"]): r for r in records}


def _healthy(zone, ip: str, reverse: str, name: str, rtype: str) -> None:
    zone.zone[(fq(reverse), "PTR")] = [fq(name)]
    zone.zone[(fq(name), rtype)] = [ip]


def test_ptr_forward_confirmation_and_helo_match_for_ipv4_and_ipv6(api, dns_zone):
    suffix = unique("mta")
    good, v6name = f"{suffix}.pool.example", f"{suffix}-6.pool.example"
    _healthy(dns_zone, "127.0.0.2", "2.0.0.127.in-addr.arpa", good, "A")
    _healthy(dns_zone, V6, V6_REVERSE, v6name, "AAAA")
    pool = _pool(api)
    both = _address(api, pool, ipv4="127.0.0.2", ipv6=V6, hostname=good)
    assert both["dns_check"] is None  # not checked yet

    checked = _check(api, pool, both)
    records = _by(checked["dns_check"]["records"])
    assert set(records) == {(ip, kind) for ip in ("127.0.0.2", V6)
                            for kind in ("ptr", "forward", "helo")}
    assert records[("127.0.0.2", "ptr")] == {**records[("127.0.0.2", "ptr")],
                                             "name": "2.0.0.127.in-addr.arpa", "type": "PTR",
                                             "found": [good], "status": "ok"}
    assert records[("127.0.0.2", "forward")]["status"] == "ok"
    assert records[("127.0.0.2", "forward")]["found"] == ["127.0.0.2"]
    assert records[("127.0.0.2", "helo")]["status"] == "ok"
    # The IPv6 address: its PTR under ip6.arpa names another host than the hostname it
    # greets with, though that name resolves back (AAAA): confirmed, but no HELO match.
    assert records[(V6, "ptr")]["name"] == V6_REVERSE and records[(V6, "ptr")]["found"] == [v6name]
    assert records[(V6, "forward")]["type"] == "AAAA"
    assert records[(V6, "forward")]["status"] == "ok"
    assert records[(V6, "helo")]["status"] == "mismatch"
    assert v6name in records[(V6, "helo")]["detail"]
    assert checked["dns_check"]["problems"] == 1
    # Kept on the address: its record and the pool's show the same check.
    assert _shown(api, pool, both)["dns_check"] == checked["dns_check"]
    listed = Api.data(api.get(f"/api/v2/admin/ip_pools/{pool['id']}"))["ip_pool"]
    assert listed["ip_addresses"][0]["dns_check"] == checked["dns_check"]


def test_missing_ptr_and_a_ptr_name_that_does_not_lead_back(api, dns_zone):
    pool = _pool(api)
    name = f"{unique('mta')}.pool.example"
    # 127.0.0.3: a PTR record whose name resolves to another address.
    dns_zone.zone[(fq("3.0.0.127.in-addr.arpa"), "PTR")] = [fq(name)]
    dns_zone.zone[(fq(name), "A")] = ["127.0.0.9"]
    elsewhere = _check(api, pool, _address(api, pool, ipv4="127.0.0.3", hostname=name))
    records = _by(elsewhere["dns_check"]["records"])
    assert records[("127.0.0.3", "ptr")]["status"] == "ok"
    assert records[("127.0.0.3", "forward")]["status"] == "mismatch"
    assert records[("127.0.0.3", "forward")]["found"] == ["127.0.0.9"]
    assert records[("127.0.0.3", "helo")]["status"] == "ok"
    # 127.0.0.4: nothing published.
    bare = _check(api, pool, _address(api, pool, ipv4="127.0.0.4", hostname=name))
    records = _by(bare["dns_check"]["records"])
    assert records[("127.0.0.4", "ptr")]["status"] == "missing"
    assert "4.0.0.127.in-addr.arpa" in records[("127.0.0.4", "ptr")]["detail"]
    assert records[("127.0.0.4", "forward")]["status"] == "missing"
    assert records[("127.0.0.4", "helo")]["status"] == "mismatch"
    assert bare["dns_check"]["problems"] == 3


def test_a_failed_lookup_is_an_error(api, dns_zone, monkeypatch):
    pool = _pool(api)
    address = _address(api, pool, ipv4="127.0.0.5", hostname="mta.pool.example")
    monkeypatch.setenv("DNS_RESOLVERS", "127.0.0.1:9")  # nobody answers there
    monkeypatch.setenv("DNS_TIMEOUT_SECONDS", "0.3")
    records = _check(api, pool, address)["dns_check"]["records"]
    assert {r["status"] for r in records} == {"error"}
    assert "failed" in _by(records)[("127.0.0.5", "ptr")]["detail"]


def test_the_scheduled_run_rechecks_and_logs_what_broke(api, dns_zone):
    name = f"{unique('mta')}.pool.example"
    _healthy(dns_zone, "127.0.0.6", "6.0.0.127.in-addr.arpa", name, "A")
    pool = _pool(api)
    address = _address(api, pool, ipv4="127.0.0.6", hostname=name)
    assert address_health.run_scheduled()["checked"] >= 1  # never checked: checked now
    first = _shown(api, pool, address)["dns_check"]
    assert first["problems"] == 0
    address_health.run_scheduled()  # checked a moment ago: left alone
    assert _shown(api, pool, address)["dns_check"]["checked_at"] == first["checked_at"]

    # A day later the PTR record is gone.
    del dns_zone.zone[(fq("6.0.0.127.in-addr.arpa"), "PTR")]
    clock.advance(timedelta(hours=25))
    lost = _lost_logged(address)
    after = _by(_shown(api, pool, address)["dns_check"]["records"])
    assert after[("127.0.0.6", "ptr")]["status"] == "missing"
    lost_at = after[("127.0.0.6", "ptr")]["lost_at"]
    assert {line["check"] for line in lost} == {"ptr", "forward", "helo"}
    assert all(line["level"] == "WARNING" and line["address"] == "127.0.0.6" for line in lost)

    # Still missing at the next check: when it broke is kept, and it is not logged again.
    clock.advance(timedelta(hours=25))
    assert _lost_logged(address) == []
    again = _by(_shown(api, pool, address)["dns_check"]["records"])
    assert again[("127.0.0.6", "ptr")]["lost_at"] == lost_at


def _lost_logged(address) -> list[dict]:
    """Run the scheduled check; the ip_address.dns_lost lines it logged about ``address``."""
    buffer = io.StringIO()
    restore = observability.capture(buffer)
    try:
        address_health.run_scheduled()
    finally:
        restore()
    lines = [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("message") == "ip_address.dns_lost"
            and line.get("ip_address_id") == address["id"]]
