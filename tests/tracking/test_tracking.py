"""Open and click tracking end to end on the running stack: rewriting through the pipeline's
step (prepare_outgoing) on Message rows made directly, the public /t/ endpoints, events and
counts on the messaging surface, machine detection, and tampered tokens."""
from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import requests

from chalicelib import clock
from chalicelib.db.models import TrackedLink
from chalicelib.services.tracking import engagement
from tests.support.tracking import (HTML_MESSAGE, html_and_text, make_message, server_id,
                                        tracking_urls)
from tests.support import Api, all_tenants, make_tenant

BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


@pytest.fixture
def public_url(stack, monkeypatch):
    monkeypatch.setenv("PUBLIC_URL", stack.base_url)
    return stack.base_url


def _prepared(tenant, **kw):
    """A sent, tracked message and its outgoing bytes."""
    sid = server_id(tenant)
    with all_tenants() as db:
        message = make_message(db, sid, sent_at=clock.now() - timedelta(hours=1), **kw)
        raw = engagement.prepare_outgoing(db, message, HTML_MESSAGE)
        return message.id, raw


def test_html_gets_pixel_and_links_and_both_are_recorded(api, tenant, public_url):
    message_id, raw = _prepared(tenant)
    html, text = html_and_text(raw)
    clicks, pixels = tracking_urls(html)
    assert len(pixels) == 1 and pixels[0].startswith(public_url + "/t/o/")
    # the two identical links share one token; mailto, anchors and opted-out links stay
    assert len(clicks) == 2 and clicks[0] == clicks[1]
    assert 'href="mailto:someone@example.org"' in html and 'href="#top"' in html
    assert 'href="https://example.org/skip"' in html
    assert "https://example.org/plain" in text and "/t/" not in text  # text never rewritten
    assert b"X-Track" not in raw  # the control header does not leave

    pixel = requests.get(pixels[0], headers={"User-Agent": BROWSER}, timeout=10)
    assert pixel.status_code == 200
    assert pixel.headers["Content-Type"] == "image/gif"
    assert pixel.content.startswith(b"GIF89a") and len(pixel.content) == 42
    assert "no-store" in pixel.headers["Cache-Control"]

    # without an Accept header naming a binary type, Chalice cannot send the GIF: the open
    # is still recorded and the answer is an empty 204
    bare = requests.get(pixels[0], headers={"User-Agent": BROWSER, "Accept": "image/*"},
                        timeout=10)
    assert bare.status_code == 204 and bare.content == b""

    click = requests.get(clicks[0], headers={"User-Agent": BROWSER}, allow_redirects=False,
                         timeout=10)
    assert click.status_code == 302
    assert click.headers["Location"] == "https://example.org/page?a=1&b=2"

    key = tenant.api_key
    opens = Api.data(api.get(f"/api/v2/server/messages/{message_id}/opens", server_key=key), 200)
    assert opens["opens_count"] == 2 and opens["pagination"]["total"] == 2
    event = opens["opens"][0]
    assert event["user_agent"] == BROWSER and event["ip_address"] == "127.0.0.1"
    assert event["likely_machine"] is False and event["detection"] is None
    got = Api.data(api.get(f"/api/v2/server/messages/{message_id}/clicks", server_key=key), 200)
    assert got["clicks_count"] == 1
    assert got["clicks"][0]["url"] == "https://example.org/page?a=1&b=2"
    assert got["clicks"][0]["likely_machine"] is False


def test_tampered_and_unknown_tokens_get_404_not_a_redirect(api, tenant, public_url):
    message_id, raw = _prepared(tenant)
    clicks, pixels = tracking_urls(html_and_text(raw)[0])
    click_token = urlsplit(clicks[0]).path.rsplit("/", 1)[1]
    open_token = urlsplit(pixels[0]).path.rsplit("/", 1)[1]
    flipped = click_token[:-1] + ("A" if click_token[-1] != "A" else "B")
    other_id = str(message_id + 1) + "." + open_token.split(".")[1]
    sig = open_token.split(".")[1]
    bad_sig = open_token.split(".")[0] + "." + sig[:-1] + ("A" if sig[-1] != "A" else "B")
    for path in (f"/t/c/{flipped}", "/t/c/short", f"/t/c/{click_token}x",
                 f"/t/o/{other_id}", f"/t/o/{bad_sig}", f"/t/o/{message_id}", "/t/o/x.y",
                 "/t/c/https%3A%2F%2Fevil.example"):
        response = requests.get(public_url + path, allow_redirects=False, timeout=10)
        Api.error(response, 404, "NotFound")
        assert "Location" not in response.headers
    # nothing was recorded for the bad tokens
    opens = Api.data(api.get(f"/api/v2/server/messages/{message_id}/opens",
                             server_key=tenant.api_key))
    assert opens["opens_count"] == 0 and opens["opens"] == []


def test_redirect_target_comes_only_from_the_stored_link(tenant, public_url):
    message_id, raw = _prepared(tenant)
    clicks, _ = tracking_urls(html_and_text(raw)[0])
    response = requests.get(clicks[0] + "?url=https://evil.example/",
                            headers={"Referer": "https://evil.example/"},
                            allow_redirects=False, timeout=10)
    assert response.status_code == 302
    assert response.headers["Location"] == "https://example.org/page?a=1&b=2"


def test_retry_reuses_tokens_and_untracked_messages_are_left_alone(tenant, public_url):
    sid = server_id(tenant)
    with all_tenants() as db:
        message = make_message(db, sid)
        first = engagement.prepare_outgoing(db, message, HTML_MESSAGE)
        second = engagement.prepare_outgoing(db, message, HTML_MESSAGE)
        assert first == second
        plain = make_message(db, sid, track=False)
        out = engagement.prepare_outgoing(db, plain, HTML_MESSAGE)
        assert out == HTML_MESSAGE.replace(b"X-Track: all\r\n", b"")
        assert db.query(TrackedLink).filter_by(message_id=plain.id).count() == 0


def test_opens_only_leaves_links_alone(tenant, public_url):
    sid = server_id(tenant)
    with all_tenants() as db:
        message = make_message(db, sid)
        message.track_clicks = False
        clicks, pixels = tracking_urls(html_and_text(
            engagement.prepare_outgoing(db, message, HTML_MESSAGE))[0])
    assert clicks == [] and len(pixels) == 1


def test_likely_machine_opens_and_clicks(api, tenant, public_url):
    message_id, raw = _prepared(tenant)
    clicks, pixels = tracking_urls(html_and_text(raw)[0])
    requests.get(pixels[0], headers={"User-Agent": "Mozilla/5.0"}, timeout=10)  # Apple MPP
    requests.get(pixels[0], timeout=10, headers={
        "User-Agent": "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 "
                      "(via ggpht.com GoogleImageProxy)"})
    requests.head(clicks[0], headers={"User-Agent": BROWSER}, timeout=10)  # a scanner's probe
    requests.get(clicks[0], headers={"User-Agent": "Barracuda Sentinel (EE)"},
                 allow_redirects=False, timeout=10)
    key = tenant.api_key
    opens = Api.data(api.get(f"/api/v2/server/messages/{message_id}/opens", server_key=key))
    by = {e["detection"]: e["likely_machine"] for e in opens["opens"]}
    assert by == {"apple_mpp": True, "google_proxy": False}
    got = Api.data(api.get(f"/api/v2/server/messages/{message_id}/clicks", server_key=key))
    assert {e["detection"]: e["likely_machine"] for e in got["clicks"]} == \
        {"head_request": True, "scanner": True}
    assert got["clicks_count"] == 2


def test_an_open_right_after_sending_is_likely_machine(api, tenant, public_url):
    sid = server_id(tenant)
    with all_tenants() as db:
        message = make_message(db, sid, sent_at=clock.now())
        raw = engagement.prepare_outgoing(db, message, HTML_MESSAGE)
        message_id = message.id
    _, pixels = tracking_urls(html_and_text(raw)[0])
    requests.get(pixels[0], headers={"User-Agent": BROWSER}, timeout=10)
    clock.advance(timedelta(minutes=5))  # the same stack process: its clock moves too
    requests.get(pixels[0], headers={"User-Agent": BROWSER}, timeout=10)
    opens = Api.data(api.get(f"/api/v2/server/messages/{message_id}/opens",
                             server_key=tenant.api_key))["opens"]
    assert [(e["likely_machine"], e["detection"]) for e in opens] == \
        [(False, None), (True, "too_soon")]  # newest first


def test_events_of_another_servers_message_are_not_found(api, tenant, public_url):
    message_id, _ = _prepared(tenant)
    other = make_tenant(api)
    for kind in ("opens", "clicks"):
        Api.error(api.get(f"/api/v2/server/messages/{message_id}/{kind}",
                          server_key=other.api_key), 404, "NotFound")
        Api.error(api.get(f"/api/v2/server/messages/999999999/{kind}",
                          server_key=tenant.api_key), 404, "NotFound")
        Api.error(api.get(f"/api/v2/server/messages/{message_id}/{kind}"), 401, "Unauthorized")


def test_domain_tracking_switches(api, tenant):
    path = f"{tenant.server_path}/domains/{tenant.domain}"
    domain = Api.data(api.patch(path, {"track_opens": False}))["domain"]
    assert domain["track_opens"] is False and domain["track_clicks"] is True
    assert Api.data(api.get(path))["domain"]["track_opens"] is False
    error = Api.error(api.patch(path, {"track_clicks": "yes"}), 422, "ValidationError")
    assert error["field"] == "track_clicks"
    Api.error(api.patch(f"{tenant.server_path}/domains/nope.example"), 404, "NotFound")
