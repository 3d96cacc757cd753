"""Tracking through the real pipeline: HTTP send -> delivery worker -> loopback MX. The mail
that arrives carries the pixel and rewritten links (DKIM-signed after rewriting); fetching
them records the open and the click and redirects to the original URL."""
from __future__ import annotations

from datetime import timedelta

import pytest
import requests

from chalicelib import clock
from tests.support.sending import dns_txt, verify_dkim
from tests.support.tracking import html_and_text, tracking_urls
from tests.support import Api, unique, wait_for

SERVER = "/api/v2/server"
HTML = ('<html><body><h1>Hi</h1><p><a href="https://shop.example/item?id=7&amp;ref=mail">Buy'
        '</a> <a href="mailto:help@shop.example">help</a> '
        '<a class="no-track" href="https://shop.example/unsubscribe">unsubscribe</a></p>'
        '</body></html>')
BROWSER = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 Version/17.5"


@pytest.fixture
def mx(mx, monkeypatch, stack):
    """conftest's mx, with tracking URLs pointing at the running stack."""
    monkeypatch.setenv("PUBLIC_URL", stack.base_url)
    return mx


def _send(api, tenant, mx, **fields):
    to = f"{unique('r')}@recipient.example"
    body = {"from": f"app@{tenant.domain}", "to": [to], "subject": "Tracked",
            "html_body": HTML, "text_body": "Buy: https://shop.example/item?id=7", **fields}
    result = Api.data(api.post(f"{SERVER}/messages", body, server_key=tenant.api_key), 201)
    received = wait_for(lambda: mx.received_for(to), 20, message="delivery to the MX")[0]
    return result["recipients"][0]["id"], received.data


def test_sent_html_carries_pixel_and_links_that_record_and_redirect(api, tenant, mx):
    message_id, data = _send(api, tenant, mx)
    assert verify_dkim(data, dns_txt(api, tenant))  # signed after rewriting
    html, text = html_and_text(data)
    clicks, pixels = tracking_urls(html)
    assert len(clicks) == 1 and len(pixels) == 1
    assert all(u.startswith(api.base_url + "/t/") for u in clicks + pixels)
    assert 'href="mailto:help@shop.example"' in html
    assert 'href="https://shop.example/unsubscribe"' in html
    assert "/t/" not in text

    clock.advance(timedelta(minutes=2))  # a person, not a prefetch right after delivery
    pixel = requests.get(pixels[0], headers={"User-Agent": BROWSER}, timeout=10)
    assert pixel.status_code == 200 and pixel.headers["Content-Type"] == "image/gif"
    click = requests.get(clicks[0], headers={"User-Agent": BROWSER}, allow_redirects=False,
                         timeout=10)
    assert click.status_code == 302
    assert click.headers["Location"] == "https://shop.example/item?id=7&ref=mail"

    record = Api.data(api.get(f"{SERVER}/messages/{message_id}",
                              server_key=tenant.api_key))["message"]
    assert (record["opens_count"], record["clicks_count"]) == (1, 1)
    assert record["track_opens"] is True and record["track_clicks"] is True
    opens = Api.data(api.get(f"{SERVER}/messages/{message_id}/opens",
                             server_key=tenant.api_key))["opens"]
    assert opens[0]["likely_machine"] is False and opens[0]["user_agent"] == BROWSER
    stats = Api.data(api.get(f"{SERVER}/stats", server_key=tenant.api_key))["stats"]
    assert (stats["by_status"], stats["opens"], stats["unique_opens"], stats["clicks"]) == \
        ({"Sent": 1}, 1, 1, 1)
    day = Api.data(api.get(f"{SERVER}/stats/deliveries", server_key=tenant.api_key,
                           params={"interval": "day"}))["stats"]
    assert day["totals"]["sent"] == 1


def test_x_track_header_and_fields_switch_tracking_per_message(api, tenant, mx):
    _, data = _send(api, tenant, mx, headers={"X-Track": "none"})
    assert b"X-Track" not in data and b"/t/" not in data
    _, data = _send(api, tenant, mx, track_clicks=False)
    clicks, pixels = tracking_urls(html_and_text(data)[0])
    assert clicks == [] and len(pixels) == 1
    _, data = _send(api, tenant, mx, headers={"X-Track": "clicks"})
    clicks, pixels = tracking_urls(html_and_text(data)[0])
    assert len(clicks) == 1 and pixels == []
    error = Api.error(api.post(f"{SERVER}/messages", {
        "from": f"app@{tenant.domain}", "to": ["x@recipient.example"], "html_body": HTML,
        "headers": {"X-Track": "sometimes"}}, server_key=tenant.api_key), 422, "ValidationError")
    assert error["field"] == "headers.X-Track"


def test_server_and_domain_switches(api, tenant, mx):
    Api.data(api.patch(tenant.server_path, {"track_opens": False}))
    _, data = _send(api, tenant, mx)
    clicks, pixels = tracking_urls(html_and_text(data)[0])
    assert len(clicks) == 1 and pixels == []
    Api.data(api.patch(f"{tenant.server_path}/domains/{tenant.domain}",
                       {"track_clicks": False}))
    _, data = _send(api, tenant, mx)
    assert b"/t/" not in data
    _, data = _send(api, tenant, mx, track_opens=True)  # the message's own field wins
    clicks, pixels = tracking_urls(html_and_text(data)[0])
    assert clicks == [] and len(pixels) == 1


def test_text_only_mail_is_never_rewritten(api, tenant, mx):
    to = f"{unique('r')}@recipient.example"
    result = Api.data(api.post(f"{SERVER}/messages", {
        "from": f"app@{tenant.domain}", "to": [to], "subject": "Plain",
        "text_body": "See https://shop.example/item"}, server_key=tenant.api_key), 201)
    data = wait_for(lambda: mx.received_for(to), 20, message="delivery")[0].data
    assert b"/t/" not in data and b"https://shop.example/item" in data
    record = Api.data(api.get(f"{SERVER}/messages/{result['recipients'][0]['id']}",
                              server_key=tenant.api_key))["message"]
    assert record["track_opens"] is False and record["track_clicks"] is False
