"""Retry schedule, relay parsing and MX resolution (against a real DNS server on loopback)."""
from __future__ import annotations

import socket

import pytest

from chalicelib.services.delivery import client as delivery, retry
from tests.dns_server import LoopbackDNS


def test_default_schedule_spans_about_two_days_and_grows(monkeypatch):
    monkeypatch.delenv("DELIVERY_RETRY_SCHEDULE", raising=False)
    monkeypatch.delenv("DELIVERY_MAX_ATTEMPTS", raising=False)
    monkeypatch.setenv("TIME_SCALE", "1")
    delays = [retry.delay_seconds(n) for n in range(1, 18)]
    assert retry.max_attempts() == 18 and retry.delay_seconds(18) is None
    assert delays == sorted(delays) and delays[0] == 60
    assert 40 * 3600 <= sum(delays) <= 56 * 3600


def test_schedule_is_configurable_and_scaled(monkeypatch):
    monkeypatch.setenv("DELIVERY_RETRY_SCHEDULE", "1, 10")
    monkeypatch.setenv("DELIVERY_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("TIME_SCALE", "0.5")
    assert [retry.delay_seconds(n) for n in range(1, 6)] == [30, 300, 300, 300, None]
    monkeypatch.setenv("DELIVERY_RETRY_SCHEDULE", "1,soon")
    with pytest.raises(retry.ScheduleError, match="soon"):
        retry.delay_seconds(1)


@pytest.mark.parametrize("value, expected", [
    ("smtp.example.com:2525", ("smtp.example.com", 2525)),
    ("smtp.example.com", ("smtp.example.com", 25)),
    ("[::1]:2526", ("::1", 2526)),
    ("127.0.0.1:25", ("127.0.0.1", 25)),
])
def test_parse_relay(value, expected):
    assert delivery.parse_relay(value) == expected


ZONE = {
    ("multi.test.", "MX"): [(20, "backup.multi.test."), (10, "primary.multi.test.")],
    ("nullmx.test.", "MX"): [(0, ".")],
    ("plain.test.", "A"): ["192.0.2.7"],
    ("noaddr.test.", "TXT"): ["x"],
}


@pytest.fixture
def dns_server(monkeypatch):
    monkeypatch.delenv("DELIVERY_RELAY", raising=False)
    with LoopbackDNS(dict(ZONE)) as server:  # a test may change its own copy
        monkeypatch.setenv("DNS_RESOLVERS", f"127.0.0.1:{server.port}")  # as operators do
        yield server


def test_mx_hosts_in_preference_order(dns_server):
    assert delivery.targets("multi.test") == [("primary.multi.test", 25),
                                               ("backup.multi.test", 25)]


def test_no_mx_falls_back_to_the_domain_address(dns_server):
    assert delivery.targets("plain.test") == [("plain.test", 25)]


@pytest.mark.parametrize("domain, needle", [
    ("nullmx.test", "null MX"),
    ("missing.test", "does not exist"),
    ("noaddr.test", "no MX, A or AAAA"),
])
def test_undeliverable_domains_fail_permanently(dns_server, domain, needle):
    with pytest.raises(delivery.TargetError) as info:
        delivery.targets(domain)
    assert info.value.status == delivery.HARD and needle in info.value.details
    assert info.value.recipient_rejected


def test_delivery_keeps_positive_answers_for_their_ttl(dns_server, monkeypatch):
    """Delivery asks the resolver once per MX and host while the answers' TTL lasts (the
    zone's is 60 s), not once per message; a "no" is never kept; DNS_CACHE_MAX_SECONDS=0
    asks every time."""
    from chalicelib.services.delivery import connect

    monkeypatch.setenv("DNS_CACHE_MAX_SECONDS", "300")
    dns_server.zone[("mx1.multi.test.", "A")] = ["127.0.0.9"]
    for _ in range(3):
        assert delivery.targets("multi.test")[0] == ("primary.multi.test", 25)
        assert connect.resolve("mx1.multi.test", 25) == [(socket.AF_INET, "127.0.0.9")]
        with pytest.raises(delivery.TargetError):
            delivery.targets("missing.test")
    assert dns_server.asked[("multi.test.", "MX")] == 1
    assert dns_server.asked[("mx1.multi.test.", "A")] == 1
    assert dns_server.asked[("mx1.multi.test.", "AAAA")] == 1  # "no AAAA" is kept too
    assert dns_server.asked[("missing.test.", "MX")] == 3
    # a changed record is seen once the kept answer is dropped
    dns_server.zone[("multi.test.", "MX")] = [(10, "other.multi.test.")]
    assert delivery.targets("multi.test")[0] == ("primary.multi.test", 25)
    from chalicelib import dns_lookup

    dns_lookup.forget_cached()
    assert delivery.targets("multi.test") == [("other.multi.test", 25)]
    monkeypatch.setenv("DNS_CACHE_MAX_SECONDS", "0")
    for _ in range(2):
        delivery.targets("multi.test")
    assert dns_server.asked[("multi.test.", "MX")] == 4


def test_kept_answers_expire_at_the_cap(dns_server, monkeypatch):
    """DNS_CACHE_MAX_SECONDS caps how long an answer is kept, below its TTL (60 s here)."""
    import time

    monkeypatch.setenv("DNS_CACHE_MAX_SECONDS", "0.2")
    for _ in range(2):
        delivery.targets("multi.test")
    assert dns_server.asked[("multi.test.", "MX")] == 1
    time.sleep(0.3)
    delivery.targets("multi.test")
    assert dns_server.asked[("multi.test.", "MX")] == 2


def test_verification_lookups_are_never_kept(dns_server, monkeypatch):
    from chalicelib import dns_lookup

    monkeypatch.setenv("DNS_CACHE_MAX_SECONDS", "300")
    for _ in range(2):
        assert dns_lookup.mx_hosts("multi.test")[0] == "primary.multi.test"
    assert dns_server.asked[("multi.test.", "MX")] == 2


def test_relay_overrides_mx(dns_server, monkeypatch):
    monkeypatch.setenv("DELIVERY_RELAY", "relay.internal:587")
    assert delivery.targets("multi.test") == [("relay.internal", 587)]


@pytest.mark.parametrize("value", ["mx", "MX", " "])
def test_mx_names_the_mx_hosts(dns_server, monkeypatch, value):
    monkeypatch.setenv("DELIVERY_RELAY", value)
    assert delivery.targets("multi.test") == [("primary.multi.test", 25),
                                               ("backup.multi.test", 25)]


def test_capture_keeps_the_message_and_never_connects(dns_server, monkeypatch, tmp_path):
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("CAPTURE_DIR", str(tmp_path))
    assert delivery.targets("multi.test") == [delivery.CAPTURE]
    outcome = delivery.send(delivery.targets("multi.test"), mail_from="tok123@rp.test",
                            rcpt_to="ann@multi.test", data=b"Subject: x\r\n\r\nbody\r\n")
    assert (outcome.status, outcome.host, outcome.code) == (delivery.SENT, "capture", 250)
    assert (tmp_path / "tok123.eml").read_bytes().endswith(b"Subject: x\r\n\r\nbody\r\n")


def test_unreachable_hosts_give_a_soft_failure_naming_them():
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    outcome = delivery.send([("127.0.0.1", p) for p in ports], mail_from="a@rp.test",
                            rcpt_to="b@example.com", data=b"Subject: x\r\n\r\nhi\r\n")
    assert outcome.status == delivery.SOFT and outcome.stage == "connect"
    assert all(str(p) in outcome.details for p in ports) and len(outcome.tried) == 2


def test_sessions_are_reused_and_a_dead_cached_session_is_replaced():
    from tests.mx import ScriptedMX

    first = ScriptedMX().start()
    data = b"From: a@example.com\r\nSubject: x\r\n\r\nhi\r\n"
    hosts = [("127.0.0.1", first.port)]
    try:
        for n in range(3):
            outcome = delivery.send(hosts, mail_from="rp@rp.test", rcpt_to=f"u{n}@example.org",
                                    data=data)
            assert outcome.status == delivery.SENT, outcome.details
        assert first.connections == 1 and len(first.messages) == 3
    finally:
        first.stop()  # the server goes away; our cached session is now dead
    second = ScriptedMX(port=first.port).start()
    try:
        outcome = delivery.send(hosts, mail_from="rp@rp.test", rcpt_to="again@example.org",
                                data=data)
        assert outcome.status == delivery.SENT, outcome.details
        assert second.connections == 1 and len(second.messages) == 1
    finally:
        delivery.close_cached()
        second.stop()
