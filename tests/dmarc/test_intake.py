"""DMARC aggregate reports mailed to a domain's report address, through the real gateway over
SMTP, as Google, Microsoft, Yahoo and a smaller receiver send them; then read back through
the management API (reports, rows filtered by period and result, sources with which are
ours, the daily summary). Bombs and reports about other domains are refused with a 554 and
logged, and the gateway goes on taking reports."""
from __future__ import annotations

import smtplib
from datetime import datetime, timedelta

import pytest

from tests.dmarc import samples
from tests.dns_helpers import fq
from tests.support.dmarc import BILLION_LAUGHS, attached, zipped
from tests.support.observability import metrics
from tests.support.smtp import plain_client
from tests.support import Api, make_tenant
from tests.support.dmarc import report_address, send
from tests.support.dmarc import domain_record

DAY = datetime.utcnow().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)


def _iso(value: datetime) -> str:
    return value.isoformat() + "Z"


WEEK = {"from": _iso(DAY - timedelta(days=3)), "to": _iso(DAY + timedelta(days=4))}








def dmarc(api, tenant, what: str, **params) -> dict:
    return Api.data(api.get(tenant.server_path + f"/domains/{tenant.domain}/{what}",
                            params={**WEEK, **params}))


def test_the_suggested_record_asks_for_reports_here_with_the_authorization_record(api, tenant):
    records = domain_record(api, tenant)["dns_records"]
    address = report_address(api, tenant)
    local, _, at = address.partition("@")
    assert records["dmarc"]["value"] == f"v=DMARC1; p=none; rua=mailto:{address}"
    assert local.startswith("dmarc+") and len(local) == len("dmarc+") + 32
    assert at == "rp.mx.service.test"  # the return-path domain: its MX is the gateway
    assert records["dmarc_report_authorization"] == {
        "type": "TXT", "name": f"{tenant.domain}._report._dmarc.rp.mx.service.test",
        "value": "v=DMARC1"}
    other = make_tenant(api)  # each domain its own address
    assert report_address(api, other) != address


def test_reports_from_the_big_receivers_are_stored_per_record(stack, api, tenant, logs):
    pool = samples.ensure_pool(api)
    to = report_address(api, tenant)
    for sender in ("google", "outlook", "yahoo", "plain"):
        assert send(stack, to, samples.mail(sender, to, tenant.domain, DAY)) == {}
    listed = dmarc(api, tenant, "dmarc_reports")
    assert listed["pagination"]["total"] == 4
    by_reporter = {r["reporter"]: r for r in listed["dmarc_reports"]}
    assert {r: (x["attachment"], x["messages"], x["passed"]) for r, x in by_reporter.items()} == {
        "google.com": ("zip", 17, 14), "Outlook.com": ("gzip", 11, 7),
        "Yahoo": ("gzip", 6, 5), "mail.example.org": ("xml", 2, 2)}
    google = by_reporter["google.com"]
    assert google["begin_at"] == _iso(DAY) and google["report_id"] == "5717107811868587391"
    assert google["policy"]["domain"] == tenant.domain and google["policy"]["p"] == "none"
    assert google["mail_from"] == "noreply-dmarc-support@google.com"
    shown = Api.data(api.get(tenant.server_path +
                             f"/domains/{tenant.domain}/dmarc_reports/{google['id']}"))
    assert shown["dmarc_report"] == google
    line = logs.wait("dmarc.received", report=google["id"])
    assert (line["records"], line["messages"], line["domain_id"]) == \
        (3, 17, domain_record(api, tenant)["id"])

    # Rows: filtered by result, by source and by report
    failed = dmarc(api, tenant, "dmarc_records", result="fail")["dmarc_records"]
    assert sorted((r["source_ip"], r["count"], r["reporter"]) for r in failed) == [
        ("192.0.2.77", 4, "Outlook.com"), ("198.51.100.23", 1, "Yahoo"),
        ("198.51.100.23", 3, "google.com")]
    assert all(r["dmarc"] == "fail" and not r["ours"] for r in failed)
    spoof = next(r for r in failed if r["source_ip"] == "192.0.2.77")
    assert (spoof["spf_result"], spoof["envelope_to"], spoof["disposition"]) == \
        ("softfail", "hotmail.com", "none")
    passed = dmarc(api, tenant, "dmarc_records", result="pass", per_page=2)
    assert passed["pagination"]["total"] == 5 and len(passed["dmarc_records"]) == 2
    ours = dmarc(api, tenant, "dmarc_records", source_ip=samples.OURS)["dmarc_records"]
    assert len(ours) == 4 and all(r["ours"] and r["known_as"] == f"IP pool {pool}" for r in ours)
    only_google = dmarc(api, tenant, "dmarc_records", report=google["id"])["dmarc_records"]
    assert [r["count"] for r in only_google] == [12, 2, 3]
    assert only_google[1]["dkim_aligned"] and not only_google[1]["spf_aligned"]
    forwarded = dmarc(api, tenant, "dmarc_records", source_ip="2001:db8::25")["dmarc_records"]
    assert forwarded[0]["reasons"] == [{"type": "forwarded",
                                        "comment": "arrived through a mailing list"}]
    assert forwarded[0]["header_from"] == f"news.{tenant.domain}"

    # Sources: most messages first, which are ours, who reported them
    sources = dmarc(api, tenant, "dmarc_sources")["dmarc_sources"]
    assert [(s["source_ip"], s["messages"], s["passed"], s["failed"], s["ours"])
            for s in sources] == [
        (samples.OURS, 26, 26, 0, True), ("192.0.2.77", 4, 0, 4, False),
        ("198.51.100.23", 4, 0, 4, False), ("2001:db8::25", 2, 2, 0, False)]
    assert sources[0]["known_as"] == f"IP pool {pool}"
    assert sources[0]["reporters"] == ["Outlook.com", "Yahoo", "google.com"]
    assert (sources[0]["spf_aligned"], sources[0]["dkim_aligned"]) == (24, 26)
    failing = dmarc(api, tenant, "dmarc_sources", result="fail")["dmarc_sources"]
    assert [s["source_ip"] for s in failing] == ["192.0.2.77", "198.51.100.23"]

    # The summary: one bucket per UTC day of the range, the reports' day holding them all
    summary = dmarc(api, tenant, "dmarc_summary")["dmarc_summary"]
    assert summary["totals"] == {"messages": 36, "passed": 28, "failed": 8, "reports": 4,
                                 "sources": 4}
    assert summary["report_address"] == to
    days = {b["start"]: (b["messages"], b["passed"]) for b in summary["buckets"]}
    assert len(days) == 7 and days[_iso(DAY)] == (36, 28)
    assert sum(n for n, _ in days.values()) == 36
    # outside the range: nothing
    earlier = Api.data(api.get(tenant.server_path + f"/domains/{tenant.domain}/dmarc_summary",
                               params={"from": _iso(DAY - timedelta(days=9)),
                                       "to": _iso(DAY - timedelta(days=1))}))
    assert earlier["dmarc_summary"]["totals"]["messages"] == 0


def test_a_resent_report_is_stored_once(stack, api, tenant):
    to = report_address(api, tenant)
    raw = samples.mail("outlook", to, tenant.domain, DAY)
    send(stack, to, raw)
    send(stack, to, raw)
    assert dmarc(api, tenant, "dmarc_reports")["pagination"]["total"] == 1


def test_bombs_and_strangers_reports_are_refused_logged_and_the_gateway_goes_on(
        stack, api, tenant, logs, monkeypatch):
    monkeypatch.setenv("DMARC_REPORT_MAX_BYTES", "2MB")
    to = report_address(api, tenant)
    before = metrics(api)["email_service_dmarc_refused_total"]
    bomb = zipped({"report.xml": samples.xml("google", tenant.domain, DAY)[:300] +
                 b"\0" * (256 * 1024 * 1024)})
    cases = [
        (attached("zip", bomb), "inflates past 2097152 bytes"),
        (samples.envelope("plain", to, tenant.domain, BILLION_LAUGHS,
                          report=samples.attachment("xml", "r", BILLION_LAUGHS)), "DTD"),
        (samples.mail("google", to, "someone-else.example.org", DAY),
         f"about someone-else.example.org, not {tenant.domain}"),
    ]
    for raw, reason in cases:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            send(stack, to, raw, mail_from="reports@receiver.example")
        assert refused.value.smtp_code == 554, refused.value
        assert reason in refused.value.smtp_error.decode()
        line = logs.wait("dmarc.refused", mail_from="reports@receiver.example")
        assert reason in line["reason"] and line["level"] == "WARNING"
        logs.buffer.truncate(0)
        logs.buffer.seek(0)
    assert metrics(api)["email_service_dmarc_refused_total"] == before + len(cases)
    assert dmarc(api, tenant, "dmarc_reports")["pagination"]["total"] == 0
    # the same connection-less gateway still takes a good report
    assert send(stack, to, samples.mail("yahoo", to, tenant.domain, DAY)) == {}
    assert dmarc(api, tenant, "dmarc_reports")["pagination"]["total"] == 1


def test_unknown_report_addresses_are_refused_at_rcpt(stack, api, tenant):
    to = report_address(api, tenant)
    local, _, at = to.partition("@")
    other_token = local[:-1] + ("0" if local[-1] != "0" else "1")  # a domain that is not
    for address in (f"{other_token}@{at}",
                    "dmarc+" + "0" * 32 + "@rp.mx.service.test",
                    "dmarc+not-a-token@rp.mx.service.test"):
        with plain_client(stack.smtp_port) as client:
            client.mail("reports@receiver.example")
            code, reply = client.rcpt(address)
        assert code == 550 and b"DMARC report address" in reply, (address, code, reply)
    # upper case (some MTAs change it) still reaches the domain
    assert send(stack, to.upper(), samples.mail("plain", to, tenant.domain, DAY)) == {}


def test_sources_of_ours_beyond_ip_pools_relay_and_configured_ranges(
        stack, api, tenant, monkeypatch):
    to = report_address(api, tenant)
    send(stack, to, samples.mail("outlook", to, tenant.domain, DAY))

    def known() -> dict:
        return {s["source_ip"]: s["known_as"]
                for s in dmarc(api, tenant, "dmarc_sources")["dmarc_sources"]}
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    assert known()["192.0.2.77"] is None
    monkeypatch.setenv("DELIVERY_RELAY", "192.0.2.77:2525")
    assert known()["192.0.2.77"] == "relay 192.0.2.77"
    monkeypatch.setenv("DELIVERY_RELAY", "capture")
    monkeypatch.setenv("DMARC_KNOWN_SOURCES", "192.0.2.0/28, 2001:db8::/32")
    assert known()["192.0.2.77"] is None  # outside the /28
    monkeypatch.setenv("DMARC_KNOWN_SOURCES", "192.0.2.64/26")
    assert known()["192.0.2.77"] == "DMARC_KNOWN_SOURCES"


def test_query_errors_name_the_parameter_and_other_servers_see_nothing(api, tenant):
    base = tenant.server_path + f"/domains/{tenant.domain}"
    for path, params, field in (("/dmarc_records", {"result": "maybe"}, "result"),
                                ("/dmarc_sources", {"from": "yesterday"}, "from"),
                                ("/dmarc_summary", {"from": _iso(DAY), "to": _iso(DAY)}, "from"),
                                ("/dmarc_summary", {"from": "2000-01-01T00:00:00Z"}, "from"),
                                ("/dmarc_records", {"report": "0"}, "report")):
        error = Api.error(api.get(base + path, params=params), 422, "ValidationError")
        assert error["field"] == field, (path, error)
    Api.error(api.get(base + "/dmarc_reports/999999999"), 404, "NotFound")
    Api.error(api.get(base + "/dmarc_reports", admin_key=""), 401, "Unauthorized")
    other = make_tenant(api)
    Api.error(api.get(other.server_path + f"/domains/{tenant.domain}/dmarc_reports"),
              404, "NotFound")


def test_a_relay_named_by_host_is_ours_at_the_addresses_dns_gives_it(stack, api, tenant,
                                                                     dns_zone, monkeypatch):
    from chalicelib.services.dmarc import reports

    to = report_address(api, tenant)
    send(stack, to, samples.mail("outlook", to, tenant.domain, DAY))
    host = "smarthost.relay-test.example.net"
    dns_zone.zone[(fq(host), "A")] = ["192.0.2.77"]
    reports._relay_cache.clear()
    monkeypatch.setenv("DELIVERY_RELAY", f"{host}:587")
    sources = {s["source_ip"]: s for s in dmarc(api, tenant, "dmarc_sources")["dmarc_sources"]}
    assert sources["192.0.2.77"]["ours"] and sources["192.0.2.77"]["known_as"] == f"relay {host}"
    rows = dmarc(api, tenant, "dmarc_records", source_ip="192.0.2.77")["dmarc_records"]
    assert rows[0]["known_as"] == f"relay {host}"
