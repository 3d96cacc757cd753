"""The reputation guard (issue 34, item 5): a server's bounce rate (bounces saying the
address is bad) and complaint rate over a sliding window of the mail it sent; a warning and
a pause at the thresholds, never below the minimum volume; a pause suspends its sending with
a reason read in the API and the audit trail; only an instance admin lifts it, and the
window restarts at the lift. Counted once per message, and paused once, however many
workers count at the same time."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from chalicelib import clock, observability
from chalicelib.db import counters
from chalicelib.db.models import AuthEvent, StatCounter
from chalicelib.services.reputation import guard
from tests.support.accounts import events, make_user
from tests.support.reputation import (count, messages, outcomes, reputation, server,
                                      server_id)
from tests.support import Api, all_tenants, wait_for

SERVER = "/api/v2/server"


@pytest.fixture(autouse=True)
def small_volume(monkeypatch):
    monkeypatch.setenv("REPUTATION_MIN_VOLUME", "100")
    monkeypatch.setenv("DELIVERY_RELAY", "capture")  # what is sent is kept, not bounced
    monkeypatch.setenv("CAPTURE_DIR", "")


def send(api, tenant):
    return api.post(f"{SERVER}/messages", {"from": f"app@{tenant.domain}",
                                            "to": ["someone@recipient.example"],
                                            "subject": "Hi", "text_body": "Hi"},
                    server_key=tenant.api_key)


def test_no_verdict_below_the_minimum_volume(api, tenant):
    sid = server_id(api, tenant)
    outcomes(sid, 90, failed=9)
    for message_id in messages(sid, 30):
        count(sid, message_id)
    shown = reputation(api, tenant)
    assert (shown["sent"], shown["delivered"], shown["bounces"]) == (99, 90, 30)
    assert shown["bounce_rate"] == pytest.approx(30.303) and not shown["enough_volume"]
    assert shown["state"] == "ok" and shown["findings"] == []
    assert server(api, tenant)["suspended"] is False


def test_a_warning_then_a_pause_that_suspends_sending(api, tenant, logs):  # noqa: F811
    sid = server_id(api, tenant)
    before = observability.counters()
    outcomes(sid, 190, failed=10)  # 200 messages sent
    ids = messages(sid, 20)
    for message_id in ids[:9]:  # 4.5%
        count(sid, message_id)
    assert reputation(api, tenant)["state"] == "ok"

    count(sid, ids[9])  # 5%: the warning threshold
    shown = reputation(api, tenant)
    assert shown["state"] == "warning" and shown["bounce_rate"] == 5.0
    [finding] = shown["findings"]
    assert (finding["metric"], finding["level"], finding["threshold"], finding["volume"]) == \
        ("bounce_rate", "warning", 5.0, 200)
    record = server(api, tenant)
    assert record["reputation"]["state"] == "warning" and record["suspended"] is False
    assert "at or above the warning threshold of 5%" in record["reputation"]["reason"]

    for message_id in ids[10:19]:  # 9.5%: still a warning, reported once
        count(sid, message_id)
    assert reputation(api, tenant)["state"] == "warning"
    count(sid, ids[19])  # 10%: the pause threshold
    record = server(api, tenant)
    assert record["suspended"] is True and record["reputation"]["state"] == "paused"
    assert record["suspension_reason"].startswith("paused by the reputation guard: bounce rate")
    shown = reputation(api, tenant)
    assert shown["state"] == "paused" and shown["paused_at"] is not None
    assert "an instance administrator can lift the pause" in shown["reason"]

    # Sending is suspended: the API refuses with the reason, the messaging surface shows it
    error = Api.error(send(api, tenant), 403, "ServerSuspended")
    assert "paused by the reputation guard" in error["message"]
    info = Api.data(api.get(f"{SERVER}/", server_key=tenant.api_key))["server"]
    assert info["reputation"]["state"] == "paused" and info["suspension_reason"]

    [audited] = [e for e in events(api, event="server_paused")
                 if (e["details"] or "").startswith(f"server {sid} (")]
    assert "bounce rate" in audited["details"] and audited["user_id"] is None
    assert len(logs.find("reputation.warning", server_id=sid)) == 1
    [paused] = logs.find("reputation.paused", server_id=sid)
    assert paused["bounces"] == 20 and paused["sent"] == 200 and paused["bounce_rate"] == 10.0
    after = observability.counters()
    assert after["reputation_warnings"] - before["reputation_warnings"] == 1
    assert after["reputation_pauses"] - before["reputation_pauses"] == 1


def test_complaints_are_judged_against_delivered_mail(api, tenant):
    sid = server_id(api, tenant)
    outcomes(sid, 1000, failed=500)
    ids = messages(sid, 5)
    for message_id in ids[:4]:  # 0.4% of delivered: a warning (0.1%), not a pause (0.5%)
        count(sid, message_id, guard.COMPLAINT)
    shown = reputation(api, tenant)
    assert shown["state"] == "warning" and shown["complaint_rate"] == 0.4
    assert shown["findings"][0]["metric"] == "complaint_rate"
    count(sid, ids[4], guard.COMPLAINT)
    assert server(api, tenant)["reputation"]["state"] == "paused"


def test_each_message_counts_once_per_kind(api, tenant):
    sid = server_id(api, tenant)
    [message_id] = messages(sid, 1)
    assert count(sid, message_id) is True
    assert count(sid, message_id) is False  # the same DSN again, or a DSN after a refusal
    assert count(sid, message_id, guard.COMPLAINT) is True
    assert count(sid, message_id, guard.COMPLAINT) is False
    shown = reputation(api, tenant)
    assert (shown["bounces"], shown["complaints"]) == (1, 1)


def test_an_instance_admin_lifts_the_pause_and_the_window_restarts(api, tenant):
    sid = server_id(api, tenant)
    outcomes(sid, 100)
    ids = messages(sid, 30)
    for message_id in ids[:10]:
        count(sid, message_id)
    assert server(api, tenant)["suspended"] is True

    # The organization's owner cannot lift the guard's pause (an admin's suspension, yes)
    owner = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"user_id": owner.id, "role": "owner"}), 201)
    error = Api.error(api.post(tenant.server_path + "/unsuspend", bearer=owner.token), 403,
                      "Forbidden")
    assert "only an instance administrator can lift the pause" in error["message"]

    lifted = Api.data(api.post(tenant.server_path + "/unsuspend"))["server"]
    assert lifted["suspended"] is False and lifted["reputation"]["state"] == "ok"
    shown = reputation(api, tenant)
    assert shown["lifted_by"].startswith("admin API key") and shown["since"] == \
        shown["lifted_at"]
    assert (shown["sent"], shown["bounces"]) == (0, 0)  # the old window is not counted
    assert events(api, event="server_pause_lifted")[0]["details"].startswith(f"server {sid}")

    # A bounce of the old mail arriving after the lift does not pause it again ...
    count(sid, ids[10])
    assert server(api, tenant)["suspended"] is False
    # ... the new window must reach the volume and the threshold by itself
    outcomes(sid, 100)
    for message_id in ids[11:19]:
        count(sid, message_id)
    assert server(api, tenant)["suspended"] is False  # 9 bounces of 100 since the lift
    count(sid, ids[19])
    assert server(api, tenant)["suspended"] is True  # 10 of 100


def test_sending_goes_on_after_the_lift(api, tenant):
    sid = server_id(api, tenant)
    outcomes(sid, 100)
    for message_id in messages(sid, 10):
        count(sid, message_id)
    Api.error(send(api, tenant), 403, "ServerSuspended")
    Api.data(api.post(tenant.server_path + "/unsuspend"))
    assert send(api, tenant).status_code == 201


def test_an_owner_still_lifts_an_administrators_suspension(api, tenant):
    owner = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"user_id": owner.id, "role": "owner"}), 201)
    Api.data(api.post(tenant.server_path + "/suspend", {"reason": "unpaid"}))
    shown = Api.data(api.post(tenant.server_path + "/unsuspend", bearer=owner.token))
    assert shown["server"]["suspended"] is False


@pytest.mark.parametrize("mode", ["warn", "off"])
def test_the_guard_can_only_warn_or_be_off(api, tenant, monkeypatch, mode):
    monkeypatch.setenv("REPUTATION_GUARD", mode)
    sid = server_id(api, tenant)
    outcomes(sid, 100)
    for message_id in messages(sid, 20):
        count(sid, message_id)
    record = server(api, tenant)
    assert record["suspended"] is False
    assert record["reputation"]["state"] == ("warning" if mode == "warn" else "ok")
    shown = reputation(api, tenant)
    assert shown["guard"] == mode and shown["findings"][0]["level"] == "pause"


def test_the_sweeper_ends_a_warning_once_the_window_moves_on(api, tenant, monkeypatch):
    """No bounce comes any more: the stack's sweeper re-evaluates the server (guard.review)
    and the warning ends once its bounces' hour has left the window."""
    monkeypatch.setenv("REPUTATION_WINDOW_HOURS", "24")
    sid = server_id(api, tenant)
    outcomes(sid, 100)
    for message_id in messages(sid, 6):
        count(sid, message_id)
    first = reputation(api, tenant)
    assert first["state"] == "warning"
    clock.advance(timedelta(hours=10))  # re-evaluated: 6% still
    wait_for(lambda: reputation(api, tenant)["evaluated_at"] != first["evaluated_at"], 20,
             message="the sweeper's re-evaluation")
    assert server(api, tenant)["reputation"]["state"] == "warning"
    clock.advance(timedelta(hours=15))  # the hour of the mail and its bounces is gone
    wait_for(lambda: server(api, tenant)["reputation"]["state"] == "ok", 20,
             message="the warning to end")
    shown = reputation(api, tenant)
    assert shown["reason"] is None and (shown["sent"], shown["bounces"]) == (0, 0)


def test_rebuilt_counters_keep_the_guards_counts(api, tenant):
    sid = server_id(api, tenant)
    outcomes(sid, 50)
    for message_id in messages(sid, 3):
        count(sid, message_id)
    with all_tenants() as db:
        counters.rebuild(db, sid)
        assert db.scalar(select(func.sum(StatCounter.count)).where(
            StatCounter.server_id == sid, StatCounter.metric == "reputation:bounce")) == 3
    assert reputation(api, tenant)["bounces"] == 3


@pytest.mark.postgres_only
def test_workers_counting_at_once_pause_once(api, tenant, database):
    """Eight threads count the bounces that cross the pause threshold at the same time: one
    pause, one audit event, one log line's worth of metric; every bounce counted once."""
    sid = server_id(api, tenant)
    before = observability.counters()["reputation_pauses"]
    outcomes(sid, 100)
    ids = messages(sid, 24)
    for message_id in ids[:8]:
        count(sid, message_id)
    start = threading.Barrier(8)
    errors = []

    def worker(chunk):
        try:
            start.wait(10)
            for message_id in chunk:
                count(sid, message_id)
                count(sid, message_id)  # an at-least-once wake-up, again
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(ids[8 + 2 * i:10 + 2 * i],))
               for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert reputation(api, tenant)["bounces"] == 24
    assert server(api, tenant)["suspended"] is True
    assert observability.counters()["reputation_pauses"] - before == 1
    with all_tenants() as db:
        assert db.scalar(select(func.count()).select_from(AuthEvent).where(
            AuthEvent.event == "server_paused",
            AuthEvent.details.like(f"server {sid} (%"))) == 1
