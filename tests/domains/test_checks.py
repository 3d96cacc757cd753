"""Domain health (issue 15, items 1-2): GET .../domains/{name}/check looks every record up in
a real DNS server on loopback that the stack reaches through DNS_RESOLVERS, answers per
record, keeps the result on the domain, and the scheduled re-check records disappearances."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib import clock
from chalicelib.services.domains import checks
from tests.dns_helpers import (by_kind, check, domain_record, fq, publish,
                               publish_return_path_spf, txt)
from tests.support import Api, make_tenant

SPF_INCLUDE = "spf.mx.service.test"


@pytest.fixture
def fresh(api):
    """A tenant whose domain is not verified yet (nothing about it is known to be right)."""
    return make_tenant(api, verified=False)


def test_nothing_published_every_record_missing_and_kept_on_the_domain(api, fresh, dns_zone):
    result = check(api, fresh)
    assert result["ok"] is False and result["domain"] == fresh.domain
    records = by_kind(result)
    assert set(records) == {"verification", "spf", "dkim", "return_path", "return_path_spf",
                            "dmarc"}
    for record in result["records"]:
        assert record["status"] == "missing", record
        assert set(record) >= {"kind", "name", "type", "expected", "found", "status"}
    assert records["return_path"] == {**records["return_path"], "type": "CNAME",
                                      "name": f"rp.{fresh.domain}",
                                      "expected": "rp.mx.service.test"}
    assert records["dkim"]["state"] == "active"
    stored = domain_record(api, fresh)["dns_check"]
    assert stored["checked_at"] is not None and stored["problems"] == len(result["records"])
    assert stored["records"] == result["records"]


def test_published_records_are_ok_and_verify_the_return_path(api, fresh, dns_zone):
    domain = domain_record(api, fresh)
    assert domain["return_path"]["verified"] is False
    publish(dns_zone, domain["dns_records"])
    dns_zone.zone[(fq(f"_dmarc.{fresh.domain}"), "TXT")] = [txt("v=DMARC1; p=quarantine")]
    publish_return_path_spf(dns_zone)  # the installation's, at rp.mx.service.test
    result = check(api, fresh)
    assert result["ok"] is True, result
    records = by_kind(result)
    assert records["dmarc"]["policy"] == "quarantine"
    assert records["spf"]["lookups"] == 3  # a, mx, include
    assert records["dkim"]["found"] and records["return_path"]["found"] == ["rp.mx.service.test"]
    assert domain_record(api, fresh)["return_path"]["verified"] is True


def test_wrong_records_are_mismatches_with_a_reason(api, fresh, dns_zone):
    domain = domain_record(api, fresh)
    name = fq(fresh.domain)
    dns_zone.zone[(name, "TXT")] = [txt("email-service-verification=someone-elses"),
                                    txt("v=spf1 include:_spf.google.com ~all"),
                                    txt("v=spf1 -all")]
    dkim = domain["dns_records"]["dkim"]
    dns_zone.zone[(fq(dkim["name"]), "TXT")] = [txt("v=DKIM1; k=rsa; p=MIIBIjANBgkqAAAA")]
    dns_zone.zone[(fq(f"rp.{fresh.domain}"), "CNAME")] = ["bounces.elsewhere.example."]
    dns_zone.zone[(fq(f"_dmarc.{fresh.domain}"), "TXT")] = [txt("v=DMARC1; rua=mailto:x@y.z")]
    records = by_kind(check(api, fresh))
    assert records["verification"]["status"] == "mismatch"
    assert records["spf"]["status"] == "mismatch" and "2 SPF records" in records["spf"]["detail"]
    assert records["dkim"]["status"] == "mismatch" and "another public key" in \
        records["dkim"]["detail"]
    assert records["return_path"]["status"] == "mismatch"
    assert records["return_path"]["found"] == ["bounces.elsewhere.example"]
    assert records["dmarc"]["status"] == "mismatch" and records["dmarc"]["policy"] is None

    # One SPF record, but without our include
    dns_zone.zone[(name, "TXT")] = [txt("v=spf1 include:_spf.google.com ~all")]
    spf = by_kind(check(api, fresh))["spf"]
    assert spf["status"] == "mismatch" and SPF_INCLUDE in spf["detail"]


def test_spf_of_the_return_path_is_the_installations_through_the_cname(api, fresh, dns_zone):
    """Receivers evaluate SPF for the bounce address <token>@rp.<domain>: its TXT lookup
    follows the CNAME to rp.<SMTP_HOSTNAME>, where the operator's record must authorise our
    sending addresses (include SPF_INCLUDE). Without the CNAME, mail uses rp.<SMTP_HOSTNAME>
    itself, looked up directly."""
    installation, expected = "rp.mx.service.test", f"v=spf1 include:{SPF_INCLUDE} ~all"
    spf = by_kind(check(api, fresh))["return_path_spf"]
    assert (spf["name"], spf["type"], spf["expected"], spf["status"]) == \
        (installation, "TXT", expected, "missing")
    assert "the installation's return-path domain" in spf["detail"]
    assert f'operator publishes {installation} TXT "{expected}"' in spf["detail"]

    publish(dns_zone, domain_record(api, fresh)["dns_records"], "return_path")
    spf = by_kind(check(api, fresh))["return_path_spf"]
    assert (spf["name"], spf["status"]) == (f"rp.{fresh.domain}", "missing")
    assert "SPF none" in spf["detail"] and "through its CNAME" in spf["detail"]

    for wrong, reason in [("v=spf1 ip4:192.0.2.1 -all", "does not authorise our sending "
                           f"addresses (it neither includes nor redirects to {SPF_INCLUDE})"),
                          (f"v=spf1 include:{SPF_INCLUDE} +all", "every address (+all)")]:
        publish_return_path_spf(dns_zone, wrong)
        spf = by_kind(check(api, fresh))["return_path_spf"]
        assert spf["status"] == "mismatch" and reason in spf["detail"], spf
        assert spf["found"] == [wrong]

    dns_zone.zone[(fq(SPF_INCLUDE), "TXT")] = [txt("v=spf1 ip4:192.0.2.1 ip4:192.0.2.2 -all")]
    publish_return_path_spf(dns_zone)
    spf = by_kind(check(api, fresh))["return_path_spf"]
    assert (spf["status"], spf["found"], spf["lookups"]) == ("ok", [expected], 1), spf
    publish_return_path_spf(dns_zone, f"v=spf1 redirect={SPF_INCLUDE}")
    assert by_kind(check(api, fresh))["return_path_spf"]["status"] == "ok"

    # A CNAME that leads elsewhere: mail uses rp.mx.service.test, so that is what counts,
    # whatever the other target publishes.
    dns_zone.zone[(fq(f"rp.{fresh.domain}"), "CNAME")] = ["bounces.elsewhere.example."]
    dns_zone.zone[(fq("bounces.elsewhere.example"), "TXT")] = [txt("v=spf1 -all")]
    spf = by_kind(check(api, fresh))["return_path_spf"]
    assert (spf["name"], spf["status"]) == (installation, "ok")


def test_spf_needing_more_than_ten_lookups_is_flagged(api, fresh, dns_zone):
    # Our include plus two providers whose own records need 5 lookups each: 3 + 10 > 10
    for provider in ("one", "two"):
        dns_zone.zone[(fq(f"_spf.{provider}.example"), "TXT")] = [
            txt("v=spf1 a mx ptr exists:x.example include:deep.example ~all")]
    # deep.example includes one.example's record again: a loop is followed once only
    dns_zone.zone[(fq("deep.example"), "TXT")] = [
        txt("v=spf1 ip4:192.0.2.0/24 include:_spf.one.example -all")]
    dns_zone.zone[(fq(fresh.domain), "TXT")] = [txt(
        f"v=spf1 include:{SPF_INCLUDE} include:_spf.one.example include:_spf.two.example ~all")]
    spf = by_kind(check(api, fresh))["spf"]
    assert spf["status"] == "mismatch" and "more than 10 DNS lookups" in spf["detail"]
    assert spf["lookups"] > 10


def test_mx_checked_once_the_domain_receives_mail(api, tenant, dns_zone):
    assert "mx" not in by_kind(check(api, tenant))
    Api.data(api.post(tenant.server_path + "/routes", {
        "name": "support", "domain": tenant.domain, "mode": "accept"}), 201)
    assert by_kind(check(api, tenant))["mx"]["status"] == "missing"
    dns_zone.zone[(fq(tenant.domain), "MX")] = [(10, "mx.elsewhere.example.")]
    assert by_kind(check(api, tenant))["mx"]["status"] == "mismatch"
    dns_zone.zone[(fq(tenant.domain), "MX")] = [(10, "mx.elsewhere.example."),
                                                (20, "mx.service.test.")]
    assert by_kind(check(api, tenant))["mx"]["status"] == "ok"


def test_an_unanswered_lookup_is_an_error_and_changes_nothing(api, tenant, dns_zone,
                                                             monkeypatch):
    assert domain_record(api, tenant)["return_path"]["verified"] is True  # verify (DNS off)
    monkeypatch.setenv("DNS_RESOLVERS", "127.0.0.1:9")  # nobody answers there
    monkeypatch.setenv("DNS_TIMEOUT_SECONDS", "0.3")
    result = check(api, tenant)
    assert {r["status"] for r in result["records"]} == {"error"}
    assert all(r["found"] is None and "failed" in r["detail"] for r in result["records"])
    assert domain_record(api, tenant)["return_path"]["verified"] is True


def test_scheduled_recheck_records_a_disappearing_record(api, fresh, dns_zone):
    domain = domain_record(api, fresh)
    publish(dns_zone, domain["dns_records"], "verification", "spf", "dkim", "return_path")
    publish_return_path_spf(dns_zone)
    Api.data(api.post(fresh.server_path + f"/domains/{fresh.domain}/verify"))
    assert check(api, fresh)["problems"] == 1  # everything but DMARC
    first = domain_record(api, fresh)["dns_check"]["checked_at"]

    # Checked a moment ago: the scheduled run leaves it alone
    checks.run_scheduled()
    assert domain_record(api, fresh)["dns_check"]["checked_at"] == first

    # A day later the return-path CNAME and the DKIM record are gone
    del dns_zone.zone[(fq(f"rp.{fresh.domain}"), "CNAME")]
    del dns_zone.zone[(fq(domain["dns_records"]["dkim"]["name"]), "TXT")]
    clock.advance(timedelta(hours=25))
    assert checks.run_scheduled()["checked"] >= 1
    after = domain_record(api, fresh)
    records = by_kind(after["dns_check"])
    for kind in ("return_path", "dkim"):
        assert records[kind]["status"] == "missing" and records[kind]["lost_at"], records[kind]
    assert "lost_at" not in records["dmarc"]  # never was there: nothing disappeared
    assert records["spf"]["status"] == "ok" and "lost_at" not in records["spf"]
    # No longer leading to us: mail goes back to the installation's return path
    assert after["return_path"]["verified"] is False
    lost_at = records["return_path"]["lost_at"]

    # Still missing at the next check: the time it disappeared is kept
    clock.advance(timedelta(hours=25))
    checks.run_scheduled()
    assert by_kind(domain_record(api, fresh)["dns_check"])["return_path"]["lost_at"] == lost_at


def test_dns_resolvers_setting_is_validated():
    from chalicelib.config import ConfigError, load_settings

    assert load_settings({"DNS_RESOLVERS": " 192.0.2.1, [2001:db8::1]:5353,127.0.0.1:53 "}
                         ).dns_resolvers == "192.0.2.1:53,[2001:db8::1]:5353,127.0.0.1:53"
    for bad in ("dns.example.com", "192.0.2.1:0", "192.0.2.1:x"):
        with pytest.raises(ConfigError, match="DNS_RESOLVERS"):
            load_settings({"DNS_RESOLVERS": bad})


def test_webhook_hosts_are_resolved_through_dns_resolvers(api, tenant, dns_zone):
    from tests.support.webhooks import create_webhook, emit, make_message
    from tests.receivers import Receiver

    host = f"hooks.{tenant.domain}"
    with Receiver([200]) as rx:
        url = f"http://{host}:{rx.port}/hook"
        # Not in the loopback zone (nor anywhere): the URL check cannot resolve it
        err = Api.error(api.post(tenant.server_path + "/webhooks", {"name": "h", "url": url}),
                        422, "ValidationError")
        assert host in err["message"]
        dns_zone.zone[(fq(host), "A")] = ["127.0.0.1"]
        create_webhook(api, tenant, url)
        emit(make_message(tenant), "MessageSent", "accepted")
        [request] = rx.wait_for(1)
    assert request.json()["event"] == "MessageSent"
