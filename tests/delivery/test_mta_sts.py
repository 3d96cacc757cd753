"""MTA-STS for outbound mail (RFC 8461, issue 24.3), through real parts: a loopback DNS zone
(the _mta-sts TXT records, the MX and policy hosts), an HTTPS policy server under a test CA,
receiving MXes with a certificate from that CA, a self-signed one, or no TLS at all."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from chalicelib import clock
from chalicelib.services.delivery import mta_sts, client
from tests.mx import ScriptedMX
from tests.support.sending import message, sent_ok, wait_status
from tests.support import free_port, unique
from tests.tls_ca import PolicyServer, TestCA, policy_text


# --- the policy's grammar and matching ---------------------------------------------------

def test_txt_record_gives_the_policy_id_only_when_there_is_exactly_one():
    assert mta_sts.txt_id(["v=STSv1; id=20261126T01;"]) == "20261126T01"
    assert mta_sts.txt_id(["v=spf1 -all", "v=STSv1;id=abc"]) == "abc"
    assert mta_sts.txt_id(["v=STSv1; id=a", "v=STSv1; id=b"]) is None
    assert mta_sts.txt_id(["v=STSv1; id=not-alnum"]) is None
    assert mta_sts.txt_id(["v=STSv1;"]) is None and mta_sts.txt_id([]) is None


def test_policy_file_is_read_and_checked():
    policy = mta_sts.parse("a.example", "1", "version: STSv1\nmode: enforce\nmx: mx1.a.example\n"
                                             "mx: *.mail.a.example\nmax_age: 604800\n")
    assert (policy.mode, policy.mx, policy.max_age) == (
        "enforce", ("mx1.a.example", "*.mail.a.example"), 604800)
    assert policy.matches("MX1.a.example.") and policy.matches("x.mail.a.example")
    assert not policy.matches("mail.a.example") and not policy.matches("a.b.mail.a.example")
    assert not policy.matches("mx2.a.example")
    for text, problem in [
        ("version: STSv2\nmode: enforce\nmx: m\nmax_age: 1\n", "version"),
        ("version: STSv1\nmode: strict\nmx: m\nmax_age: 1\n", "mode"),
        ("version: STSv1\nmode: enforce\nmax_age: 1\n", "lists no mx"),
        ("version: STSv1\nmode: enforce\nmx: m\nmax_age: 31557601\n", "out of range"),
        ("version: STSv1\nmode: testing\nmx: m\nmax_age: soon\n", "max_age"),
    ]:
        with pytest.raises(mta_sts.PolicyError, match=problem):
            mta_sts.parse("a.example", "1", text)
    assert mta_sts.parse("a.example", "1", "version: STSv1\r\nmode: none\r\nmax_age: 0\r\n").mx == ()


# --- delivery under a policy ----------------------------------------------------------------

class Rig:
    """A zone, a test CA, an HTTPS policy server and the settings that point delivery at
    them; ``domain(...)`` publishes one recipient domain with its MX and policy."""

    def __init__(self, zone, ca: TestCA, https: PolicyServer, mx_port: int):
        self.zone, self.ca, self.https, self.mx_port = zone, ca, https, mx_port
        self.servers: list[ScriptedMX] = []

    def mx(self, host: str, tls, script=None) -> ScriptedMX:
        server = ScriptedMX(script, tls=tls, port=self.mx_port, host=host).start()
        self.servers.append(server)
        return server

    def domain(self, mode: str | None, *, mx_host: str = "mx", address: str = "127.0.0.1",
               listed: str | None = None, policy_id: str = "1", max_age: int = 86400) -> str:
        name = f"{unique('sts')}.example"
        mx_name = f"{mx_host}.{name}"
        self.zone.zone.update({(f"{name}.", "MX"): [(10, f"{mx_name}.")],
                               (f"{mx_name}.", "A"): [address]})
        if mode is not None:
            self.zone.zone.update({
                (f"_mta-sts.{name}.", "TXT"): [f'"v=STSv1; id={policy_id};"'],
                (f"mta-sts.{name}.", "A"): ["127.0.0.1"]})
            self.https.policies[f"mta-sts.{name}"] = policy_text(
                mode, listed or mx_name, max_age=max_age)
        return name

    def stop(self):
        for server in self.servers:
            server.stop()


@pytest.fixture
def rig(dns_zone, monkeypatch, tmp_path):  # noqa: F811
    ca = TestCA(tmp_path)
    mx_port = free_port()
    policies: dict[str, str] = {}
    with PolicyServer(ca, policies) as https:
        monkeypatch.delenv("DELIVERY_RELAY", raising=False)
        monkeypatch.setenv("DELIVERY_MX_PORT", str(mx_port))
        monkeypatch.setenv("MTA_STS_PORT", str(https.port))
        monkeypatch.setenv("MTA_STS_CA_BUNDLE", ca.bundle)
        monkeypatch.setenv("MTA_STS_CHECK_INTERVAL_SECONDS", "0")
        monkeypatch.setenv("TIME_SCALE", "0.0001")
        found = Rig(dns_zone, ca, https, mx_port)
        yield found
        found.stop()
        client.close_cached()


def deliver(api, tenant, domain: str, status: str) -> tuple[dict, str]:
    address = f"{unique('r')}@{domain}"
    [r] = sent_ok(api, tenant, to=[address])["recipients"]
    wait_status(api, tenant, r["id"], status)
    return message(api, tenant, r["id"])["deliveries"][0], address


def test_enforce_delivers_over_verified_tls_to_a_listed_mx(api, tenant, rig):
    domain = rig.domain("enforce")
    good = rig.mx("127.0.0.1", rig.ca.server_context(f"mx.{domain}"))
    attempt, address = deliver(api, tenant, domain, "Sent")
    assert (attempt["tls"], attempt["tls_verified"], attempt["mta_sts"]) == (True, True, "enforce")
    [got] = good.received_for(address)
    assert got.tls
    assert rig.https.requests == [f"mta-sts.{domain}"]


@pytest.mark.parametrize("tls, problem", [
    (True, "certificate is not valid for mx."),   # self-signed, for another name
    (False, "does not offer STARTTLS"),
])
def test_enforce_defers_when_the_mx_cannot_prove_its_name(api, tenant, rig, tls, problem):
    domain = rig.domain("enforce", address="127.0.0.4")
    bad = rig.mx("127.0.0.4", tls)
    attempt, _ = deliver(api, tenant, domain, "SoftFail")
    assert problem in attempt["details"] and "MTA-STS policy (enforce)" in attempt["details"]
    assert attempt["mta_sts"] == "enforce" and attempt["tls_verified"] is False
    assert bad.messages == []


def test_enforce_defers_when_no_mx_is_one_the_policy_lists(api, tenant, rig):
    domain = rig.domain("enforce", listed="mx.elsewhere.example")
    server = rig.mx("127.0.0.1", rig.ca.server_context(f"mx.{domain}"))
    attempt, _ = deliver(api, tenant, domain, "SoftFail")
    assert f"MTA-STS policy of {domain} (enforce) lists none of its MX hosts" \
        in attempt["details"] and "mx.elsewhere.example" in attempt["details"]
    assert server.connections == 0


def test_testing_mode_delivers_and_says_what_enforce_would_refuse(api, tenant, rig):
    domain = rig.domain("testing", address="127.0.0.5")
    server = rig.mx("127.0.0.5", True)  # self-signed
    attempt, address = deliver(api, tenant, domain, "Sent")
    assert (attempt["tls"], attempt["tls_verified"], attempt["mta_sts"]) == (True, False, "testing")
    assert "testing mode, enforce would have refused" in attempt["details"]
    assert "certificate is not valid" in attempt["details"]
    assert len(server.received_for(address)) == 1


def test_mode_none_and_no_policy_deliver_opportunistically(api, tenant, rig):
    none = rig.domain("none", address="127.0.0.6")
    plain = rig.domain(None, address="127.0.0.6")
    rig.mx("127.0.0.6", True)
    first, _ = deliver(api, tenant, none, "Sent")
    second, _ = deliver(api, tenant, plain, "Sent")
    assert (first["tls"], first["tls_verified"], first["mta_sts"]) == (True, False, "none")
    assert (second["tls"], second["tls_verified"], second["mta_sts"]) == (True, False, None)


def test_policy_is_cached_per_max_age_and_refetched_when_the_id_changes(api, tenant, rig):
    domain = rig.domain("enforce", max_age=3600)
    rig.mx("127.0.0.1", rig.ca.server_context(f"mx.{domain}"))
    host = f"mta-sts.{domain}"
    deliver(api, tenant, domain, "Sent")
    mta_sts.forget()  # another worker: only the database is shared
    deliver(api, tenant, domain, "Sent")
    assert rig.https.requests.count(host) == 1
    rig.zone.zone[(f"_mta-sts.{domain}.", "TXT")] = ['"v=STSv1; id=2;"']
    deliver(api, tenant, domain, "Sent")
    assert rig.https.requests.count(host) == 2
    clock.advance(timedelta(seconds=3601))  # max_age passed: fetched again
    deliver(api, tenant, domain, "Sent")
    assert rig.https.requests.count(host) == 3


def test_runs_asking_at_once_share_one_lookup(rig, monkeypatch):
    """A batch's runs to one destination start together: one of them looks the domain up
    (TXT record, cache, fetch), the others take its answer."""
    monkeypatch.setenv("MTA_STS_CHECK_INTERVAL_SECONDS", "60")
    domain = rig.domain("enforce")
    mta_sts.forget()
    start, found = threading.Barrier(8), []

    def ask():
        start.wait()
        found.append(mta_sts.policy_for(domain))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [p.mode for p in found] == ["enforce"] * 8
    assert rig.zone.asked[(f"_mta-sts.{domain}.", "TXT")] == 1
    assert rig.https.requests.count(f"mta-sts.{domain}") == 1


def test_a_cached_enforce_policy_survives_a_stripped_txt_record_and_fetch(api, tenant, rig):
    """An attacker who removes the TXT record and blocks the policy host cannot turn a
    cached policy off before its max_age (RFC 8461 3.3, 10.2)."""
    domain = rig.domain("enforce", address="127.0.0.7")
    rig.mx("127.0.0.7", rig.ca.server_context(f"mx.{domain}"))
    deliver(api, tenant, domain, "Sent")
    del rig.zone.zone[(f"_mta-sts.{domain}.", "TXT")]
    del rig.https.policies[f"mta-sts.{domain}"]
    rig.servers.pop().stop()
    impostor = rig.mx("127.0.0.7", True)  # a self-signed certificate
    attempt, _ = deliver(api, tenant, domain, "SoftFail")
    assert attempt["mta_sts"] == "enforce" and "certificate is not valid" in attempt["details"]
    assert impostor.messages == []


def test_a_policy_that_cannot_be_fetched_delivers_as_without_one(api, tenant, rig):
    domain = rig.domain("enforce", address="127.0.0.8")
    rig.https.policies.pop(f"mta-sts.{domain}")  # 404 (and a certificate for other names)
    server = rig.mx("127.0.0.8", True)
    attempt, address = deliver(api, tenant, domain, "Sent")
    assert attempt["mta_sts"] is None and len(server.received_for(address)) == 1


def test_the_policy_host_certificate_is_validated(api, tenant, rig, monkeypatch, tmp_path):
    domain = rig.domain("enforce", address="127.0.0.9")
    server = rig.mx("127.0.0.9", True)  # self-signed: enforce would defer
    (tmp_path / "other").mkdir()
    monkeypatch.setenv("MTA_STS_CA_BUNDLE", TestCA(tmp_path / "other").bundle)
    attempt, address = deliver(api, tenant, domain, "Sent")  # untrusted policy host: no policy
    assert attempt["mta_sts"] is None and len(server.received_for(address)) == 1
    assert rig.https.requests == []  # the handshake failed before any request


def test_testing_mode_reports_on_a_reused_session_too(rig):
    domain = rig.domain(None, address="127.0.0.10")
    server = rig.mx("127.0.0.10", True)  # self-signed
    policy = mta_sts.Policy(domain, "1", "testing", (f"mx.{domain}",), 3600)
    data = b"From: a@example.com\r\nSubject: x\r\n\r\nhi\r\n"
    outcomes = [client.send([(f"mx.{domain}", rig.mx_port)], mail_from="t@rp.example",
                          rcpt_to=f"r{n}@{domain}", data=data, policy=policy)
                for n in range(2)]
    assert [o.status for o in outcomes] == [client.SENT, client.SENT]
    assert all("enforce would have refused" in o.details for o in outcomes)
    assert server.connections == 2  # the verifying attempt, then one session for both
