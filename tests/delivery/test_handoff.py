"""Small connection limits (issue 33): a run of the worker finding every slot of its
destination taken while another run of the same process holds one hands its messages to
that run (handoff.py), which carries them over its session, for their own claims, instead
of pacing them. Through real sockets: the MX counts the sessions open at once.

Each test delivers by hand (``worker.process`` / ``process_batch``; the stack's own workers
never see the wake-ups) and waits on conditions, never on time."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import update

from chalicelib import clock, queues
from chalicelib.db.models import Message
from chalicelib.services.delivery import handoff, pacing, process as worker, steps
from tests.support import all_tenants, unique, wait_for
from tests.support.delivery import (DroppedQueue, WorkerDied, deliveries_of, make_due,
                                    message_row, park_due,
                                    park_many)
from tests.support.sending import message


@pytest.fixture
def by_hand(monkeypatch, mx):
    monkeypatch.setenv("TIME_SCALE", "1")
    monkeypatch.setenv("DELIVERY_SESSION_IDLE_SECONDS", "30")
    monkeypatch.setattr(queues, "_port", DroppedQueue())
    yield mx
    pacing.release_idle(everything=True)


def _limit(monkeypatch, domain: str, connections: int) -> str:
    name = unique("ho")
    monkeypatch.setenv("DELIVERY_PACING_RULES", json.dumps(
        [{"name": name, "domains": [domain], "connections": connections}]))
    return name


class Run(threading.Thread):
    """A worker run of this process (``process_batch``) on a thread of its own."""

    def __init__(self, ids: list[int]):
        super().__init__(daemon=True)
        self.ids, self.results, self.error = ids, None, None
        self.start()

    def run(self) -> None:
        try:
            self.results = worker.process_batch(self.ids)
        except BaseException as error:  # noqa: BLE001  (kept for the test to see)
            self.error = error

    def outcome(self) -> dict:
        self.join(60)
        assert not self.is_alive(), "the run did not end"
        return self.results


def test_runs_hand_their_messages_to_the_run_holding_the_slot(api, tenant, by_hand, db,
                                                             monkeypatch):
    mx, domain = by_hand, f"{unique('two')}.example"
    _limit(monkeypatch, domain, 2)
    monkeypatch.setenv("WORKER_PROCESSES", "0")  # one worker process: its share is all
    ids, addresses = park_many(db, api, tenant, 24,
                               [f"{unique('t')}@{domain}" for _ in range(24)])
    handed: list[int] = []
    real = handoff.hand_over

    def spy(key, entry):
        handed.append(entry.message_id)
        return real(key, entry)

    monkeypatch.setattr(handoff, "hand_over", spy)
    # Six runs of this process, four wake-ups each, at once: two slots between them.
    runs = [Run(ids[n::6]) for n in range(6)]
    results: dict = {}
    for run in runs:
        results.update(run.outcome())
    assert results == {i: "Sent" for i in ids}  # none paced: the holders carried them
    assert handed  # ... because they were handed over (no slot was free for them)
    assert [len(mx.received_for(to)) for to in addresses] == [1] * 24  # each exactly once
    assert mx.peak_open <= 2  # the limit held at the MX, idle sessions included
    for message_id in ids:  # each outcome recorded against its own claim: released, once
        row = message_row(message_id)
        assert row.status == "Sent" and row.locked_by is None and row.attempts == 1
        assert [d.status for d in deliveries_of(message_id)] == ["Sent"]


def test_a_worker_process_takes_its_share_of_the_slots_and_carries_the_rest(
        api, tenant, by_hand, db, monkeypatch):
    # Two worker processes (make run's) and a limit of 2: this process takes one slot and
    # hands the rest of its messages to its holder, leaving the other slot to the other
    # process instead of taking both and making that one's runs pace.
    mx, domain = by_hand, f"{unique('share')}.example"
    name = _limit(monkeypatch, domain, 2)
    monkeypatch.setenv("WORKER_PROCESSES", "2")
    ids, addresses = park_many(db, api, tenant, 12,
                               [f"{unique('s')}@{domain}" for _ in range(12)])
    runs = [Run(ids[n::4]) for n in range(4)]
    results: dict = {}
    for run in runs:
        results.update(run.outcome())
    assert results == {i: "Sent" for i in ids}
    assert [len(mx.received_for(to)) for to in addresses] == [1] * 12
    assert mx.peak_open == 1  # one of the two slots: the other stayed free
    assert handoff.waiting(name) == 0


def test_a_handed_over_message_whose_claim_was_taken_is_not_sent(api, tenant, by_hand, db,
                                                                 monkeypatch):
    mx, domain = by_hand, f"{unique('lost')}.example"
    name = _limit(monkeypatch, domain, 1)
    first, second = park_due(db, api, tenant, domain, 2, "h")
    arrived, release = mx.hold_next_data()
    holder = Run([first])
    try:
        assert arrived.wait(30)  # the only slot is the holder's, its run in DATA
        claimant = Run([second])
        wait_for(lambda: handoff.waiting(name) == 1, message="the hand-over")
        # Its claim expires while it waits in line, and another worker claims the row.
        with all_tenants() as session:
            session.execute(update(Message).where(Message.id == second)
                            .values(locked_by="another-worker", locked_at=clock.now()))
    finally:
        release.set()
    assert holder.outcome() == {first: "Sent"}
    assert claimant.outcome() == {second: "claim-lost"}  # the marker's guard: not ours
    assert len(mx.messages) == 1 and mx.connections == 1
    assert deliveries_of(second) == []  # nothing written for it either
    assert message_row(second).locked_by == "another-worker"


def test_a_message_whose_claim_expired_in_line_is_not_started(api, tenant, by_hand, db,
                                                              monkeypatch):
    mx, domain = by_hand, f"{unique('old')}.example"
    name = _limit(monkeypatch, domain, 1)
    first, second = park_due(db, api, tenant, domain, 2, "h")
    arrived, release = mx.hold_next_data()
    holder = Run([first])
    try:
        assert arrived.wait(30)
        claimant = Run([second])
        wait_for(lambda: handoff.waiting(name) == 1, message="the hand-over")
        # The claim is as old as CLAIM_TIMEOUT_SECONDS: still ours in the database (nobody
        # took it yet), but any worker may take it now.
        monkeypatch.setenv("CLAIM_TIMEOUT_SECONDS", "5")
    finally:
        release.set()
    assert holder.outcome() == {first: "Sent"}
    assert claimant.outcome() == {second: "claim-lost"}
    assert len(mx.messages) == 1
    assert deliveries_of(second) == []
    assert message_row(second).status == "Pending"  # due again once the sweeper finds it


def test_a_holder_that_fails_leaves_the_messages_handed_to_it_due(api, tenant, by_hand, db,
                                                                  monkeypatch):
    mx, domain = by_hand, f"{unique('fail')}.example"
    name = _limit(monkeypatch, domain, 1)
    first, second, third = park_due(db, api, tenant, domain, 3, "h")
    real = steps.return_path

    def dies_on_second(row):
        if row.id == second:  # the holder's run is stopped dead while carrying it
            raise WorkerDied()
        return real(row)

    monkeypatch.setattr(steps, "return_path", dies_on_second)
    arrived, release = mx.hold_next_data()
    holder = Run([first])
    try:
        assert arrived.wait(30)
        claimants = [Run([second])]
        wait_for(lambda: handoff.waiting(name) == 1, message="the first hand-over")
        claimants.append(Run([third]))
        wait_for(lambda: handoff.waiting(name) == 2, message="the second hand-over")
    finally:
        release.set()
    holder.join(60)
    assert isinstance(holder.error, WorkerDied)
    # The one it was carrying: not sent, its claim left to expire (retried then); the one
    # still in line: back to its claimant, which found no slot free and paced it.
    assert claimants[0].outcome() == {second: "failed"}
    assert claimants[1].outcome() == {third: "paced"}
    assert len(mx.messages) == 1
    assert deliveries_of(second) == deliveries_of(third) == []
    assert message_row(second).locked_by is not None and message_row(third).locked_by is None
    shown = message(api, tenant, third)
    assert shown["status"] == "Pending" and "connections" in shown["status_details"]
    monkeypatch.setattr(steps, "return_path", real)
    # Later, the dead run's slot and the claim have lapsed: both go, once each.
    clock.advance(timedelta(seconds=2000))
    make_due(third)
    assert worker.process_batch([second, third]) == {second: "Sent", third: "Sent"}
    assert [len(mx.received_for(message_row(i).rcpt_to)) for i in (first, second, third)] == [1] * 3


def test_a_handed_over_message_still_waits_out_its_destinations_backoff(api, tenant, by_hand,
                                                                       db, monkeypatch):
    # The holder's own message gets a throttle reply while a message is in its line: the
    # destination backs off, so the handed-over one is admitted as any other would be:
    # paced until the backoff ends, for its own claim, not sent.
    mx, domain = by_hand, f"{unique('back')}.example"
    name = _limit(monkeypatch, domain, 1)
    first, second = park_due(db, api, tenant, domain, 2, "h")
    mx.script = ["421 4.7.0 Try again later, closing connection."]
    arrived, release = mx.hold_next_data()
    holder = Run([first])
    try:
        assert arrived.wait(30)
        claimant = Run([second])
        wait_for(lambda: handoff.waiting(name) == 1, message="the hand-over")
    finally:
        release.set()
    assert holder.outcome() == {first: "SoftFail"}
    assert claimant.outcome() == {second: "paced"}
    shown = message(api, tenant, second)
    assert shown["status"] == "Pending" and "answered a throttle reply" in shown["status_details"]
    assert (shown["attempts"], shown["deliveries"]) == (0, [])
    assert message_row(second).locked_by is None  # released by the holder, under its own claim
    assert len(mx.messages) == 0 and [d.code for d in deliveries_of(first)] == [421]
