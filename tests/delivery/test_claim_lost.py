"""A worker whose claim expires while the remote server holds its DATA reply: the next worker
holds the message as outcome-unknown, and the first one's late outcome (Sent, its event,
counters and webhook rows) must not be written over it. It records nothing, logs
``delivery.claim_lost`` and reports ``claim-lost``, alone and in a batch."""
from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import func, select, update

from chalicelib import clock
from chalicelib.db.models import Message, StatCounter, WebhookRequest
from chalicelib.services.delivery import process as worker
from tests.support.delivery import park_many
from tests.support.sending import message, rcpt, wait_status
from tests.support.delivery import make_due, park_settled
from tests.support.webhooks import create_webhook, server_id
from tests.receivers import Receiver
from tests.support import Api, all_tenants


def _sent_counted(server: int) -> int:
    with all_tenants() as db:
        return db.scalar(select(func.coalesce(func.sum(StatCounter.count), 0)).where(
            StatCounter.server_id == server, StatCounter.metric == "event:MessageSent"))


def _webhook_rows(message_id: int) -> int:
    with all_tenants() as db:
        return db.scalar(select(func.count()).select_from(WebhookRequest)
                         .where(WebhookRequest.message_id == message_id))


def _next_worker_takes_over(api, tenant, message_id: int) -> None:
    """CLAIM_TIMEOUT_SECONDS pass (the lease is set in the past) and the next worker claims
    the row, finds the in-flight marker and holds the message as outcome-unknown (the test's
    call or the stack's sweeper, whichever comes first)."""
    with all_tenants() as db:
        db.execute(update(Message).where(Message.id == message_id)
                   .values(locked_at=clock.now() - timedelta(seconds=2000)))
    assert worker.process(message_id) in ("unknown", "nothing-to-do", "claimed-elsewhere")
    wait_status(api, tenant, message_id, "Held")


def _late_outcome(api, tenant, mx, message_id: int) -> str | None:
    """A worker sends ``message_id``; while the MX holds its DATA reply the next worker
    takes over; then the MX accepts, late. Returns the first worker's result."""
    arrived, release = mx.hold_next_data()
    make_due(message_id)
    result: dict[str, str] = {}
    first = threading.Thread(target=lambda: result.update(first=worker.process(message_id)))
    first.start()
    try:
        assert arrived.wait(20), "the first worker's DATA"
        _next_worker_takes_over(api, tenant, message_id)
    finally:
        release.set()  # the remote server answers the first worker's DATA, late
        first.join(30)
    return result.get("first")


def _assert_held_as_unknown(api, tenant, message_id: int) -> None:
    shown = message(api, tenant, message_id)
    assert shown["status"] == "Held" and "unknown" in shown["status_details"]
    assert [d["status"] for d in shown["deliveries"]] == ["Unknown"]
    assert shown["events"] == []  # no MessageSent
    assert _webhook_rows(message_id) == 0
    with all_tenants() as db:
        row = db.get(Message, message_id)
        assert (row.sent_at, row.attempts, row.locked_by) == (None, 0, None)


def test_a_late_outcome_after_the_claim_expired_during_data_records_nothing(
        api, tenant, mx, db, monkeypatch, logs):  # noqa: F811
    server = server_id(tenant)
    with Receiver([200]) as rx:
        create_webhook(api, tenant, rx.url)  # a Sent outcome would fan out to it
        to = rcpt("slow")
        message_id = park_settled(db, api, tenant, to, monkeypatch)
        sent_before = _sent_counted(server)
        assert _late_outcome(api, tenant, mx, message_id) == "claim-lost"
    assert len(mx.received_for(to)) == 1
    _assert_held_as_unknown(api, tenant, message_id)
    assert _sent_counted(server) == sent_before
    lost = logs.wait("delivery.claim_lost", message_id=message_id)
    assert (lost["outcome"], lost["level"]) == ("Sent", "WARNING")
    assert not logs.find("delivery.attempt", message_id=message_id)


def test_a_lost_claim_in_a_batch_drops_that_outcome_but_not_the_next_marker(
        api, tenant, mx, db, logs):  # noqa: F811
    """The first message's outcome would ride on the second's in-flight marker: the marker
    and the second message go on, the first's outcome is not written."""
    ids, addresses = park_many(db, api, tenant, 2)
    arrived, release = mx.hold_next_data()
    results: dict[int, str] = {}
    batch = threading.Thread(target=lambda: results.update(worker.process_batch(ids)))
    batch.start()
    try:
        assert arrived.wait(20), "the first message's DATA"
        _next_worker_takes_over(api, tenant, ids[0])
    finally:
        release.set()
        batch.join(30)
    assert results == {ids[0]: "claim-lost", ids[1]: "Sent"}
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1]
    _assert_held_as_unknown(api, tenant, ids[0])
    second = message(api, tenant, ids[1])
    assert second["status"] == "Sent"
    assert [d["status"] for d in second["deliveries"]] == ["Sent"]
    assert [e["event"] for e in second["events"]] == ["MessageSent"]
    assert logs.wait("delivery.claim_lost", message_id=ids[0])["outcome"] == "Sent"


def test_a_late_refusal_after_the_claim_expired_does_not_suppress_the_recipient(
        api, tenant, mx, db, monkeypatch):
    """A HardFail outcome also adds a suppression (in the same transaction): with the claim
    lost, that is rolled back with the rest."""
    to = rcpt("slowrefusal")
    message_id = park_settled(db, api, tenant, to, monkeypatch)
    mx.script = ["550 5.1.1 no such user"]
    assert _late_outcome(api, tenant, mx, message_id) == "claim-lost"
    _assert_held_as_unknown(api, tenant, message_id)
    listed = Api.data(api.get(f"{tenant.server_path}/suppressions",
                              params={"query": to}))["suppressions"]
    assert listed == []
