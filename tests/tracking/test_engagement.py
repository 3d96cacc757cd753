"""Tracking's pure parts: switches, the X-Track header, open tokens, machine detection."""
from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest

from chalicelib import errors
from chalicelib.services.tracking import engagement
from chalicelib.services.tracking.detect import classify

NOW = datetime(2030, 5, 1, 12, 0, 0)
BROWSER = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36"


def _flags(server=(True, True), domain=(True, True), **kw):
    srv = SimpleNamespace(track_opens=server[0], track_clicks=server[1])
    dom = SimpleNamespace(track_opens=domain[0], track_clicks=domain[1])
    return engagement.resolve_flags(srv, dom, **kw)


def test_switches_from_server_domain_header_and_fields():
    assert _flags() == (True, True)
    assert _flags(server=(False, True)) == (False, True)
    assert _flags(domain=(True, False)) == (True, False)
    assert _flags(has_html=False) == (False, False)  # text parts are never tracked
    assert _flags(header="none") == (False, False)
    assert _flags(header=" Opens ") == (True, False)
    assert _flags(server=(False, False), header="all") == (True, True)
    assert _flags(header="none", track_clicks=True) == (False, True)  # fields win
    assert _flags(track_opens=False) == (False, True)
    with pytest.raises(errors.ValidationError) as caught:
        _flags(header="maybe")
    assert caught.value.field == "headers.X-Track"


@pytest.mark.parametrize("raw, expected", [
    (b"From: a@b\r\nX-Track: all\r\nSubject: s\r\n\r\nX-Track: body stays\r\n",
     b"From: a@b\r\nSubject: s\r\n\r\nX-Track: body stays\r\n"),
    (b"x-track: none\r\n folded\r\n\tmore\r\nSubject: s\r\n\r\nbody",
     b"Subject: s\r\n\r\nbody"),
    (b"From: a@b\nX-TRACK: opens\nSubject: s\n\nbody", b"From: a@b\nSubject: s\n\nbody"),
    (b"From: a@b\r\nX-Tracking-Id: 5\r\n\r\nbody", b"From: a@b\r\nX-Tracking-Id: 5\r\n\r\nbody"),
    (b"no header block at all", b"no header block at all"),
])
def test_strip_header(raw, expected):
    assert engagement.strip_header(raw) == expected


def test_open_tokens_are_tamper_evident():
    token = engagement.open_token(42)
    assert engagement.message_id_from_open_token(token) == 42
    number, signature = token.split(".")
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    other = engagement.open_token(43).split(".")[1]
    for bad in (f"43.{signature}", f"{number}.{flipped}", f"{number}.{other}", number,
                f"042.{signature}", f"{token}.x", "", "-1.abc", f"{number}.{signature[:-2]}"):
        assert engagement.message_id_from_open_token(bad) is None, bad


def test_link_tokens_are_long_and_random():
    tokens = {engagement.new_link_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) == 32 and engagement._LINK_TOKEN.match(t) for t in tokens)


def _classify(kind="open", ua=BROWSER, ip="198.51.100.7", method="GET", sent_ago=3600):
    return classify(kind=kind, user_agent=ua, ip=ip, method=method,
                    sent_at=NOW - timedelta(seconds=sent_ago), at=NOW, machine_seconds=5)


def test_machine_detection():
    assert (_classify().likely_machine, _classify().detection) == (False, None)
    assert _classify(ua="Mozilla/5.0").detection == "apple_mpp"
    assert _classify(ip="17.58.100.1").detection == "apple_mpp"
    google = _classify(ua="Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 "
                          "(via ggpht.com GoogleImageProxy)")
    assert (google.likely_machine, google.detection) == (False, "google_proxy")
    assert _classify(kind="click", ua="YahooMailProxy; https://help.yahoo.com").likely_machine
    assert _classify(ua="").detection == "no_user_agent"
    assert _classify(ua=None).likely_machine
    assert _classify(kind="click", method="HEAD").detection == "head_request"
    assert _classify(kind="click", ua="Mimecast URL Protect").detection == "scanner"
    assert _classify(kind="click", ua="python-requests/2.32").detection == "scanner"
    assert _classify(sent_ago=2).detection == "too_soon"
    assert _classify(sent_ago=6).likely_machine is False
    # a click from Apple's network is a person behind iCloud Private Relay, not a prefetch
    assert _classify(kind="click", ip="17.58.100.1").likely_machine is False
    no_sent = classify(kind="open", user_agent=BROWSER, ip=None, sent_at=None, at=NOW,
                       machine_seconds=5)
    assert no_sent.likely_machine is False
