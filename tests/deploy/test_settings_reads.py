"""get_settings() re-reads the settings when one of our environment variables changes, and
only then: an unrelated change, or none, gives the same Settings object."""
from __future__ import annotations

from chalicelib.config import get_settings


def test_settings_follow_our_variables_and_ignore_others(monkeypatch):
    monkeypatch.delenv("DELIVERY_RELAY", raising=False)
    first = get_settings()
    assert get_settings() is first  # nothing changed
    monkeypatch.setenv("SOMETHING_NOT_OURS_I26", "1")
    assert get_settings() is first
    monkeypatch.setenv("DELIVERY_RELAY", "relay.example:2525")
    changed = get_settings()
    assert changed is not first and changed.delivery_relay == "relay.example:2525"
    monkeypatch.setenv("DELIVERY_RELAY", "other.example:25")  # changed again, same length
    assert get_settings().delivery_relay == "other.example:25"
    monkeypatch.delenv("DELIVERY_RELAY")
    assert get_settings().delivery_relay == first.delivery_relay
