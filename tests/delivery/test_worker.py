"""The delivery worker's guarantees: a duplicate wake-up or racing workers send once; a
worker that dies after the remote server accepted the data neither resends nor leaves the
message locked; early wake-ups only re-enqueue; the retry schedule runs out into HardFail."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import update

from chalicelib import clock, queues
from chalicelib.db.models import Message
from chalicelib.db import claims
from chalicelib.services.delivery import attempt, process as worker, client
from tests.conftest import TEST_DATABASE_URL
from tests.support.sending import message, rcpt, sent_ok, wait_status
from tests.support import all_tenants, wait_for
from tests.support.delivery import WorkerDied, deliveries_of, make_due, park_message, park_settled

postgres_only = pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                                   reason="needs PostgreSQL (concurrent row claims)")



def test_early_wakeup_only_reenqueues(api, tenant, mx, db):
    message_id = park_message(db, api, tenant, rcpt("early"))
    assert worker.process(message_id) == "early"
    assert deliveries_of(message_id) == []
    assert worker.process(99999999) == "nothing-to-do"


def test_a_wakeup_just_before_its_row_is_due_is_not_dropped(api, tenant, mx, db, monkeypatch):
    """The row becomes due between the claim's now and the worker's second look: that is an
    early wake-up (re-enqueued), not a row "claimed elsewhere" left for the next sweep."""
    message_id = park_settled(db, api, tenant, rcpt("edge"), monkeypatch)
    real_params = claims.claim_params

    test_thread = threading.current_thread()

    def params_then_time_passes(row_id, worker_name):
        params = real_params(row_id, worker_name)
        if threading.current_thread() is not test_thread or row_id != message_id:
            return params  # the stack's own workers run as usual
        with all_tenants() as session:  # due a moment after the claim's now ...
            session.execute(update(Message).where(Message.id == row_id).values(
                next_attempt_at=params[claims.CLAIM_NOW] + timedelta(microseconds=5)))
        clock.advance(timedelta(milliseconds=1))  # ... and already past when it looks again
        monkeypatch.setattr(claims, "claim_params", real_params)
        return params

    monkeypatch.setattr(claims, "claim_params", params_then_time_passes)
    assert worker.process(message_id) == "early"
    wait_for(lambda: [d.status for d in deliveries_of(message_id)] == ["Sent"], 20,
             message="the re-enqueued wake-up to deliver")


def test_a_worker_that_lost_its_claim_never_reaches_data(api, tenant, mx, db, monkeypatch):
    """The claim expired during the attempt and another worker took the row: the InFlight
    marker is written only under our claim, so this worker closes the session before DATA."""
    to = rcpt("lost")
    message_id = park_settled(db, api, tenant, to, monkeypatch)
    real_targets = client.targets
    test_thread = threading.current_thread()

    def targets_while_claim_is_taken(domain):
        if threading.current_thread() is not test_thread:
            return real_targets(domain)  # the stack's own workers deliver as usual
        with all_tenants() as session:
            session.execute(update(Message).where(Message.id == message_id)
                            .values(locked_by="another-worker", locked_at=clock.now()))
        return real_targets(domain)

    monkeypatch.setattr(client, "targets", targets_while_claim_is_taken)
    make_due(message_id)
    assert worker.process(message_id) == "claim-lost"
    assert deliveries_of(message_id) == []
    assert mx.received_for(to) == []
    with all_tenants() as session:
        row = session.get(Message, message_id)
        assert (row.locked_by, row.status, row.attempts) == ("another-worker", "Pending", 0)


def test_the_sweeper_wakes_a_due_row_once_until_it_is_claimed(api, tenant, mx, db, monkeypatch):
    """During a backlog a due row's wake-up sits in the queue: later sweeps must not add more.
    It is woken again only after SWEEP_REWAKE_SECONDS without a claim (a lost wake-up), or at
    once after a claim consumed the last one."""
    from chalicelib.db import claims

    monkeypatch.setenv("SWEEP_REWAKE_SECONDS", "600")
    message_id = park_message(db, api, tenant, rcpt("sweep"))
    # "Held" keeps the stack's own sweeper and workers away from the row; the sweep here
    # is narrowed to it.
    with all_tenants() as session:
        session.execute(update(Message).where(Message.id == message_id).values(
            status="Held", next_attempt_at=clock.now() - timedelta(minutes=5)))

    def sweep():
        with all_tenants() as session:
            return claims.due_ids(session, Message, 10, 0, Message.id == message_id)

    assert sweep() == [message_id]
    assert sweep() == []  # its wake-up may still be queued
    clock.advance(timedelta(seconds=601))
    assert sweep() == [message_id]  # lost after all: woken again
    with all_tenants() as session:
        assert claims.claim(session, Message, message_id, "w1")
        session.execute(update(Message).where(Message.id == message_id)
                        .values(locked_by=None, locked_at=None))
    assert sweep() == [message_id]  # the claim consumed it: due again, woken again


def test_a_restart_of_the_local_stack_forgets_queued_wakeups(api, tenant, mx, db):
    from chalicelib.config import get_settings
    from chalicelib.local.stack import prepare
    from chalicelib.db import claims

    message_id = park_message(db, api, tenant, rcpt("restart"))
    with all_tenants() as session:
        session.execute(update(Message).where(Message.id == message_id).values(
            status="Held", next_attempt_at=clock.now() - timedelta(minutes=5)))
        assert claims.due_ids(session, Message, 10, 0, Message.id == message_id)
    prepare(get_settings())  # what a start does before its first sweep
    with all_tenants() as session:
        assert claims.due_ids(session, Message, 10, 0, Message.id == message_id) == \
            [message_id]


@pytest.mark.postgres_only
@postgres_only
def test_duplicate_wakeups_and_racing_workers_send_once(api, tenant, mx, db):
    to = rcpt("race")
    message_id = park_message(db, api, tenant, to)
    make_due(message_id)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def racer():
        barrier.wait()
        outcomes.append(worker.process(message_id))

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for _ in range(5):  # duplicate wake-ups through the queue as well
        queues.enqueue("deliveries", message_id)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_for(lambda: message(api, tenant, message_id)["status"] == "Sent")
    assert outcomes.count("Sent") <= 1
    assert len(mx.received_for(to)) == 1
    assert [d.status for d in deliveries_of(message_id)] == ["Sent"]
    # A late duplicate finds nothing to do.
    assert worker.process(message_id) == "nothing-to-do"
    assert len(mx.received_for(to)) == 1




def test_worker_dying_after_remote_acceptance_holds_instead_of_resending(
        api, tenant, mx, db, monkeypatch):
    to = rcpt("crash")
    message_id = park_message(db, api, tenant, to)
    real_record = attempt.record
    died = []

    def dying_record(*args, **kwargs):
        if not died:
            died.append(True)
            raise WorkerDied()  # the process stops after the remote 250, before the commit
        return real_record(*args, **kwargs)

    monkeypatch.setattr(attempt, "record", dying_record)
    make_due(message_id)
    try:
        worker.process(message_id)
    except WorkerDied:
        pass
    wait_for(lambda: died and mx.received_for(to), message="the first attempt")
    [stale] = deliveries_of(message_id)
    assert stale.status == "InFlight" and stale.stage == "data"
    with all_tenants() as session:
        row = session.get(Message, message_id)
        assert row.locked_by is not None and row.status == "Pending"

    # While the claim is live nobody touches the row; once it expires (the worker is gone),
    # the next wake-up resolves it without resending.
    assert worker.process(message_id) == "claimed-elsewhere"
    clock.advance(timedelta(seconds=2000))
    shown = wait_status(api, tenant, message_id, "Held")
    assert "unknown" in shown["status_details"]
    assert [d["status"] for d in shown["deliveries"]] == ["Unknown"]
    with all_tenants() as session:
        assert session.get(Message, message_id).locked_by is None
    assert len(mx.received_for(to)) == 1


def test_retries_run_out_into_hard_fail(api, tenant, mx, monkeypatch):
    monkeypatch.setenv("DELIVERY_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("DELIVERY_RETRY_SCHEDULE", "1,2")
    mx.script = ["421 4.3.2 shutting down"] * 3
    to = rcpt("exhaust")
    [r] = sent_ok(api, tenant, to=[to])["recipients"]
    shown = wait_status(api, tenant, r["id"], "HardFail")
    assert [e["event"] for e in shown["events"]] == ["MessageDelayed", "MessageDelayed",
                                                     "MessageDeliveryFailed"]
    assert "retries exhausted after 3 attempts" in shown["status_details"]
    assert not mx.received_for(to)
    # A temporary failure is not the recipient's fault: no suppression.
    from tests.support import Api
    listed = Api.data(api.get(f"{tenant.server_path}/suppressions"))["suppressions"]
    assert to.lower() not in [s["address"] for s in listed]


def test_unreachable_host_is_a_soft_failure(api, tenant, monkeypatch, stack):
    from tests.support import free_port

    monkeypatch.setenv("DELIVERY_RELAY", f"127.0.0.1:{free_port()}")  # nothing listens
    monkeypatch.setenv("TIME_SCALE", "1")
    [r] = sent_ok(api, tenant)["recipients"]
    shown = wait_status(api, tenant, r["id"], "SoftFail")
    assert shown["deliveries"][0]["stage"] == "connect"
    assert shown["next_attempt_at"] and [e["event"] for e in shown["events"]] == ["MessageDelayed"]
