"""The console's DMARC page of a domain and the overview's opens and clicks over time, in a
real browser over the real API: reports mailed to the gateway show up on the domain's page
with their sources (ours or not, failing ones highlighted) and the pass rate per day; opens
and clicks of the last 24 hours are drawn per hour. Screenshots in var/screenshots/."""
from __future__ import annotations

from datetime import timedelta

from chalicelib import clock
from chalicelib.db.models import ClickEvent, OpenEvent, TrackedLink
from chalicelib.services.tracking import engagement
from tests.browser.conftest import make_user
from tests.dmarc import samples
from tests.support.dmarc import report_address, send
from tests.support import Api, all_tenants, make_tenant
from tests.support.tracking import make_message, server_id


def _viewer(api: Api, tenant) -> dict:
    user = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"user_id": user["id"], "role": "viewer"}), 201)
    return user


def test_a_domains_dmarc_reports_page(console, api, stack):
    tenant = make_tenant(api)
    pool = samples.ensure_pool(api)
    to = report_address(api, tenant)
    day = clock.now().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    for sender in ("google", "outlook", "yahoo", "plain"):
        send(stack, to, samples.mail(sender, to, tenant.domain, day))

    console.sign_in(_viewer(api, tenant)["email_address"])
    page = console.open(f"/orgs/{tenant.org}/servers/{tenant.server}/domains")
    page.get_by_role("heading", name="Domains", level=1).wait_for()
    dmarc_row = page.locator(".dns-record[data-record='dmarc']")
    assert to in dmarc_row.inner_text()
    assert page.get_by_text(f"{tenant.domain}._report._dmarc.rp.mx.service.test").count() == 1
    page.get_by_role("link", name=f"DMARC reports for {tenant.domain}").click()
    page.get_by_role("heading", name=f"DMARC reports for {tenant.domain}", level=1).wait_for()

    stats = page.locator(".stats")
    assert "77.8%" in stats.inner_text() and "36" in stats.inner_text()  # 28 of 36 passed
    chart = page.get_by_role("img", name="Messages passing and failing DMARC per UTC day, "
                                         "last 30 days")
    assert chart.locator("rect.bar.sent").count() == 1
    assert chart.locator("rect.bar.failed").count() == 1
    assert "77.8% of 36 passed" in page.get_by_role("list", name="Pass rate per day").inner_text()

    sources = page.get_by_role("table").first
    ours = sources.get_by_role("row").filter(has_text=samples.OURS)
    assert f"Ours · IP pool {pool}" in ours.inner_text() and "Passing" in ours.inner_text()
    spoof = sources.get_by_role("row").filter(has_text="192.0.2.77")
    assert "Unknown sender, failing" in spoof.inner_text()
    assert spoof.get_attribute("class") == "fail-unknown"
    assert ours.get_attribute("class") is None
    assert page.locator(".notice.warn", has_text="2 source(s) that are not ours").count() == 1
    reports = page.get_by_role("table").nth(1)
    assert reports.get_by_role("row").count() == 5  # header + 4 reports
    assert "Outlook.com" in reports.inner_text() and "gzip" in reports.inner_text()
    console.shot("dmarc-domain-reports")

    # another range with nothing in it says so, and how reports start
    page.get_by_role("link", name="Last 7 days").click()
    page.get_by_role("link", name="Last 7 days", exact=True).wait_for()
    assert page.get_by_role("table").count() == 2


def test_an_empty_domain_says_how_reports_start(console, api):
    tenant = make_tenant(api)
    console.sign_in(_viewer(api, tenant)["email_address"])
    page = console.open(f"/orgs/{tenant.org}/servers/{tenant.server}/domains/{tenant.domain}/dmarc")
    page.locator(".notice", has_text="No report in this range").wait_for()
    assert report_address(api, tenant) in page.locator(".sub").nth(1).inner_text()
    console.shot("dmarc-domain-empty")


def test_the_overview_draws_opens_and_clicks_over_time(console, api):
    tenant = make_tenant(api)
    sid = server_id(tenant)
    now = clock.now()
    with all_tenants() as db:
        message = make_message(db, sid, created_at=now - timedelta(hours=5))
        link = TrackedLink(message_id=message.id, token=engagement.new_link_token(),
                           url="https://example.org/")
        db.add(link)
        db.flush()
        for hours_ago, first in ((4, True), (4, False), (2, False)):
            db.add(OpenEvent(message_id=message.id, server_id=sid, first=first,
                             created_at=now - timedelta(hours=hours_ago)))
        db.add(ClickEvent(message_id=message.id, server_id=sid, link_id=link.id, url=link.url,
                          first=True, created_at=now - timedelta(hours=2)))
    console.sign_in(_viewer(api, tenant)["email_address"])
    page = console.open(f"/orgs/{tenant.org}/servers/{tenant.server}")
    chart = page.get_by_role("img", name="Opens and clicks per hour, last 24 hours")
    chart.wait_for()
    opens = chart.locator("rect.bar.opens")
    clicks = chart.locator("rect.bar.clicks")
    assert opens.count() == 2 and clicks.count() == 1  # two hours with opens, one with a click
    titles = [opens.nth(i).locator("title").text_content() for i in range(2)]
    assert sorted(t.rsplit(": ", 1)[1] for t in titles) == ["1 Opens", "2 Opens"]
    # side by side, not stacked: the click bar stands beside the opens bar of its hour
    assert float(clicks.first.get_attribute("x")) > float(opens.nth(1).get_attribute("x"))
    console.shot("overview-engagement")
