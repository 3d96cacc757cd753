"""The suppression policy (services/suppressions/policy.py): the reason decides, not the
digit: an address-level reason suppresses at once; a mailbox full only when repeated over
days; a refusal about the sender, the IP or the content never."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib import clock
from chalicelib.services.failures import classify
from chalicelib.services.messages import retention
from chalicelib.services.organizations import credentials
from chalicelib.services.suppressions import entries, policy
from tests.support import unique


@pytest.fixture
def server(db, tenant):
    return credentials.authenticate_key(db, tenant.api_key, "API").server


def fail(db, server, address, text, **kwargs):
    return policy.after_failure(db, server.id, address, classify(text=text, **kwargs),
                                origin="bounce", details=text, message_id=42)


def test_address_level_suppresses_at_once_with_its_reason(db, server):
    address = f"{unique('gone')}@example.org"
    added = fail(db, server, address, "550 5.1.1 <x>: Recipient address rejected: User unknown")
    assert added is not None and added.reason == "HardBounce"
    assert added.bounce_reason == "no_such_user" and added.message_id == 42
    assert added.origin == "bounce" and added.expires_at is not None
    assert entries.is_suppressed(db, server.id, address)


@pytest.mark.parametrize("text", [
    "554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org",
    "550 5.7.26 Unauthenticated email from example.com is not accepted due to domain's DMARC "
    "policy", "550 5.7.1 Message rejected as spam", "550 5.7.25 no PTR record",
    "554 5.7.1 Relaying denied", "554 transaction failed"])
def test_refusals_about_the_sender_ip_or_content_never_suppress(db, server, text):
    address = f"{unique('good')}@example.org"
    for _ in range(5):
        assert fail(db, server, address, text) is None
        clock.advance(timedelta(days=10))
    assert not entries.is_suppressed(db, server.id, address)


def test_a_full_mailbox_suppresses_only_when_repeated_over_days(db, server, monkeypatch):
    monkeypatch.setenv("SUPPRESSION_REPEAT_FAILURES", "3")
    monkeypatch.setenv("SUPPRESSION_REPEAT_DAYS", "15")
    address = f"{unique('full')}@example.org"
    full = "552 5.2.2 The email account that you tried to reach is over quota"
    # three failures in one day: not enough days
    for _ in range(3):
        assert fail(db, server, address, full) is None
    clock.advance(timedelta(days=8))
    assert fail(db, server, address, full) is None  # 4 failures over 8 days
    assert policy.pending_failures(db, server.id, address).failures == 4
    clock.advance(timedelta(days=8))
    added = fail(db, server, address, full)  # 5 failures over 16 days
    assert added is not None and added.bounce_reason == "mailbox_full"
    assert added.details.startswith("5 failures over 16 days (last: mailbox_full)")
    assert policy.pending_failures(db, server.id, address) is None  # the count is spent


def test_a_quiet_spell_starts_the_count_again(db, server, monkeypatch):
    monkeypatch.setenv("SUPPRESSION_REPEAT_FAILURES", "2")
    monkeypatch.setenv("SUPPRESSION_REPEAT_DAYS", "3")
    address = f"{unique('spell')}@example.org"
    expired = dict(status="4.4.7", text="smtp; 451 4.4.7 delivery time expired")
    assert policy.after_failure(db, server.id, address, classify(**expired), origin="bounce",
                                details="x") is None
    clock.advance(timedelta(days=4))  # longer than the span apart: a new count
    assert policy.after_failure(db, server.id, address, classify(**expired), origin="bounce",
                                details="x") is None
    assert policy.pending_failures(db, server.id, address).failures == 1
    # and the retention sweep forgets a stale count
    clock.advance(timedelta(days=4))
    retention.prune(db)
    db.expire_all()
    assert policy.pending_failures(db, server.id, address) is None


def test_an_expired_relay_report_with_user_unknown_is_not_acted_on_at_once(db, server):
    address = f"{unique('relay')}@example.org"
    verdict = classify(status="4.1.1", text="450 4.1.1 <x>: Recipient address rejected: "
                                             "User unknown", action="failed")
    assert verdict.about_recipient and verdict.temporary
    assert policy.after_failure(db, server.id, address, verdict, origin="bounce",
                                details="x") is None
    assert not entries.is_suppressed(db, server.id, address)
