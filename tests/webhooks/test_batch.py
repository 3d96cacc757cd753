"""Webhook deliveries in batches (services/webhooks/batch.py): one claim and one transaction
for the batch on PostgreSQL, events of one message kept in order, a killed worker leaves
every row due again."""
from __future__ import annotations

import pytest

from chalicelib.services.webhooks import batch as webhook_batch
from chalicelib.services.webhooks import deliver as single
from tests.conftest import TEST_DATABASE_URL
from tests.support.webhooks import create_webhook, log_rows, queue_rows
from tests.receivers import Receiver
from tests.support.webhooks import emit_events

postgres_only = pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                                   reason="the batch's single transaction is PostgreSQL's")


class WorkerDied(BaseException):
    pass




@pytest.fixture
def private_targets(monkeypatch):
    monkeypatch.setenv("WEBHOOKS_ALLOW_PRIVATE_TARGETS", "true")




def test_a_batch_delivers_every_row_once_in_order(api, tenant, private_targets):
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        ids = emit_events(tenant, hook["id"], [(0, "MessageDelayed"), (1, "MessageSent"),
                                           (0, "MessageSent"), (2, "MessageHeld")])
        results = webhook_batch.process_batch(ids + [ids[1], 99999999])
        assert [results[i] for i in ids] == ["delivered"] * 4 and results[99999999] == "gone"
        rx.wait_for(4)
        # One message's events in the order they happened; the others' may overlap them.
        by_message: dict[int, list[str]] = {}
        for r in rx.requests:
            by_message.setdefault(r.json()["payload"]["message"]["id"], []).append(
                r.json()["event"])
        assert sorted(by_message.values()) == [
            ["MessageDelayed", "MessageSent"], ["MessageHeld"], ["MessageSent"]]
        assert queue_rows(hook["id"]) == []
        assert [(r.attempt, r.success) for r in log_rows(hook["id"])] == [(1, True)] * 4
        assert webhook_batch.process_batch(ids) == {i: "gone" for i in ids}
        assert len(rx.requests) == 4


def test_a_failed_event_keeps_the_later_events_of_its_message_behind_it(
        api, tenant, private_targets):
    # The first event fails (whenever it arrives: the other message's may come first).
    with Receiver(answer=lambda r: 500 if r.json()["event"] == "MessageDelayed" else 200) as rx:
        hook = create_webhook(api, tenant, rx.url)
        first, later, other = emit_events(tenant, hook["id"], [
            (0, "MessageDelayed"), (0, "MessageSent"), (1, "MessageSent")])
        results = webhook_batch.process_batch([first, later, other])
        assert results == {first: "retry", later: "after-earlier-event", other: "delivered"}
        # Two requests: the failed first event and the other message's; not the later one.
        assert sorted(rx.events()) == ["MessageDelayed", "MessageSent"]
        rx.requests.sort(key=lambda r: r.json()["event"])
        rows = {row.id: row for row in queue_rows(hook["id"])}
        assert set(rows) == {first, later}
        sent_to = [r.json()["payload"]["message"]["id"] for r in rx.requests]
        assert sent_to[0] == rows[first].message_id != sent_to[1]
        assert rows[later].attempts == 0  # never tried: it was not sent before the first
        assert rows[later].next_attempt_at >= rows[first].next_attempt_at


@postgres_only
def test_a_worker_killed_mid_batch_leaves_every_row_due_again(api, tenant, private_targets,
                                                               monkeypatch):
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        ids = emit_events(tenant, hook["id"], [(i, "MessageSent") for i in range(4)])
        real = single.attempt_job
        calls = []

        def attempt_then_die(job, settings):
            outcome = real(job, settings)
            calls.append(job)
            if len(calls) == 3:
                raise WorkerDied()
            return outcome

        monkeypatch.setattr(single, "attempt_job", attempt_then_die)
        with pytest.raises(WorkerDied):
            webhook_batch.process_batch(ids)
        monkeypatch.setattr(single, "attempt_job", real)
        # Nothing of the batch was recorded: every row is due again, unlocked, untried.
        rows = queue_rows(hook["id"])
        assert sorted(r.id for r in rows) == ids
        assert all(r.attempts == 0 and r.locked_by is None for r in rows)
        assert log_rows(hook["id"]) == []
        # At least once: what was sent (the third and any other lane in flight beside it;
        # the batch waited for them) will be sent again.
        assert len(rx.requests) == len(calls) >= 3
        assert set(webhook_batch.process_batch(ids).values()) == {"delivered"}
        assert queue_rows(hook["id"]) == []
        assert len(log_rows(hook["id"])) == 4


@pytest.mark.skipif(TEST_DATABASE_URL.startswith("postgresql"),
                    reason="PostgreSQL's batch holds row locks instead (test above)")
def test_a_worker_killed_mid_batch_leaves_claimed_rows_to_the_claim_expiry(
        api, tenant, private_targets, monkeypatch):
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        ids = emit_events(tenant, hook["id"], [(i, "MessageSent") for i in range(4)])
        real = single.attempt_job
        calls = []

        def attempt_then_die(job, settings):
            outcome = real(job, settings)
            calls.append(job)
            if len(calls) == 3:
                raise WorkerDied()
            return outcome

        monkeypatch.setattr(single, "attempt_job", attempt_then_die)
        with pytest.raises(WorkerDied):
            webhook_batch.process_batch(ids)
        monkeypatch.setattr(single, "attempt_job", real)
        # Nothing recorded; every row still claimed by the dead worker: no one posts them...
        rows = queue_rows(hook["id"])
        assert sorted(r.id for r in rows) == ids
        assert all(r.attempts == 0 and r.locked_by for r in rows)
        assert log_rows(hook["id"]) == []
        assert set(webhook_batch.process_batch(ids).values()) == {"busy"}
        assert len(rx.requests) == len(calls) >= 3
        # ... until the claim expires: then each is delivered once more, and recorded once.
        monkeypatch.setenv("CLAIM_TIMEOUT_SECONDS", "0")
        assert set(webhook_batch.process_batch(ids).values()) == {"delivered"}
        assert queue_rows(hook["id"]) == []
        assert len(log_rows(hook["id"])) == 4
