"""Deliveries in batches (services/delivery/batch.py): one claim for the batch, one SMTP
session for consecutive messages to one destination, each outcome written with the next
message's in-flight marker; and a worker killed mid-batch leaves every message sent once
(recorded, or held as Unknown when its outcome was lost) or due again."""
from __future__ import annotations


import pytest

from chalicelib.db.models import Message
from chalicelib.services.delivery import process as worker, recorder as recording, client
from chalicelib.workers import dispatch
from tests.support.sending import message, rcpt, wait_status
from tests.support.delivery import (WorkerDied, deliveries_of, kill_and_recover, park_many)
from tests.support import all_tenants, unique


def _claim(message_id: int):
    with all_tenants() as session:
        row = session.get(Message, message_id)
        return row.status, row.locked_by


def test_batch_sends_each_once_on_one_session_and_records_each(api, tenant, mx, db):
    ids, addresses = park_many(db, api, tenant, 5)
    # A duplicate wake-up in the same batch and one for a row that is gone change nothing.
    results = worker.process_batch(ids + [ids[0], 99999999])
    assert results == {**{i: "Sent" for i in ids}, 99999999: "nothing-to-do"}
    assert mx.connections == 1  # one SMTP session, RSET between messages
    for message_id, to in zip(ids, addresses):
        assert len(mx.received_for(to)) == 1
        shown = message(api, tenant, message_id)
        assert shown["status"] == "Sent"
        assert [d["status"] for d in shown["deliveries"]] == ["Sent"]
        assert [e["event"] for e in shown["events"]] == ["MessageSent"]
        assert _claim(message_id)[1] is None  # the claim is released with the outcome
    # A late batch of the same wake-ups finds nothing to do.
    assert set(worker.process_batch(ids).values()) == {"nothing-to-do"}
    assert len(mx.messages) == 5


def test_batch_records_failures_per_message_and_replaces_a_closed_session(api, tenant, mx, db,
                                                                         monkeypatch):
    # The MX's script is consumed in arrival order: the two destinations one after the other
    # (side by side, see test_concurrency.py, either could come first).
    monkeypatch.setenv("DELIVERY_CONCURRENCY", "1")
    # 1st accepted; 2nd refused at RCPT (5xx; the session goes on after RSET); 3rd deferred
    # with 421 at DATA, after which the session is closed; the 4th goes over a fresh one. (It
    # is for another domain, sorted after the first: the 421 puts recipient.example into
    # backoff, see test_pacing.py.)
    addresses = [rcpt(f"batch{i}") for i in range(3)] + [f"{unique('batch3')}@recipient2.example"]
    ids, addresses = park_many(db, api, tenant, 4, addresses)
    mx.script = ["250", "rcpt:550 5.1.1 no such user", "421 4.3.2 closing"]
    results = worker.process_batch(ids)
    assert [results[i] for i in ids] == ["Sent", "HardFail", "SoftFail", "Sent"]
    assert [len(mx.received_for(to)) for to in addresses] == [1, 0, 0, 1]
    assert mx.connections == 2
    wait_status(api, tenant, ids[2], "Sent")  # its retry (TIME_SCALE makes it immediate)
    shown = [message(api, tenant, i) for i in ids]
    assert [m["status"] for m in shown] == ["Sent", "HardFail", "Sent", "Sent"]
    assert [[d["status"] for d in m["deliveries"]] for m in shown] == \
        [["Sent"], ["HardFail"], ["SoftFail", "Sent"], ["Sent"]]
    assert [[e["event"] for e in m["events"]] for m in shown] == \
        [["MessageSent"], ["MessageDeliveryFailed"], ["MessageDelayed", "MessageSent"],
         ["MessageSent"]]
    assert [len(mx.received_for(to)) for to in addresses] == [1, 0, 1, 1]


def test_worker_killed_after_a_message_was_accepted_mid_batch(api, tenant, mx, db,
                                                              monkeypatch):
    ids, addresses = park_many(db, api, tenant, 5)
    real_send = client.send
    calls = []

    def send_then_die(*args, **kwargs):
        outcome = real_send(*args, **kwargs)
        calls.append(outcome.status)
        if len(calls) == 3:
            raise WorkerDied()  # the 3rd message was accepted; its outcome is never written
        return outcome

    monkeypatch.setattr(client, "send", send_then_die)
    with pytest.raises(WorkerDied):
        worker.process_batch(ids)
    monkeypatch.setattr(client, "send", real_send)
    # Right after the kill: the 2nd outcome was written with the 3rd marker; the 3rd is in
    # flight; the 4th and 5th are still claimed and untouched.
    assert [_claim(i)[0] for i in ids] == ["Sent", "Sent", "Pending", "Pending", "Pending"]
    assert [[d.status for d in deliveries_of(i)] for i in ids] == \
        [["Sent"], ["Sent"], ["InFlight"], [], []]
    assert all(_claim(i)[1] is not None for i in ids[2:])
    assert worker.process(ids[3]) == "claimed-elsewhere"  # nobody touches a live claim

    shown = kill_and_recover(api, tenant, mx, ids, addresses)
    assert [m["status"] for m in shown] == ["Sent", "Sent", "Held", "Sent", "Sent"]
    assert "unknown" in shown[2]["status_details"]
    assert [d["status"] for d in shown[2]["deliveries"]] == ["Unknown"]
    # Every message reached the MX exactly once: none lost, none sent twice.
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 1, 1, 1]


def test_worker_killed_before_a_messages_data_mid_batch(api, tenant, mx, db, monkeypatch):
    ids, addresses = park_many(db, api, tenant, 4)
    real_mark = recording.Recorder.mark_in_flight
    marks = []

    def die_before_third_marker(recorder, db_, message_id, host, raw, worker_id, *rest):
        marks.append(message_id)
        if len(marks) == 3:
            raise WorkerDied()  # before the 3rd message's marker (and the 2nd's outcome)
        return real_mark(recorder, db_, message_id, host, raw, worker_id, *rest)

    monkeypatch.setattr(recording.Recorder, "mark_in_flight", die_before_third_marker)
    with pytest.raises(WorkerDied):
        worker.process_batch(ids)
    monkeypatch.setattr(recording.Recorder, "mark_in_flight", real_mark)
    assert [[d.status for d in deliveries_of(i)] for i in ids] == \
        [["Sent"], ["InFlight"], [], []]
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 0, 0]

    shown = kill_and_recover(api, tenant, mx, ids, addresses)
    # The 2nd was accepted but its outcome died with the worker: held as Unknown, never
    # resent. The 3rd never reached DATA: simply sent now, like the 4th.
    assert [m["status"] for m in shown] == ["Sent", "Held", "Sent", "Sent"]
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 1, 1]
    assert [[d["status"] for d in m["deliveries"]] for m in shown] == \
        [["Sent"], ["Unknown"], ["Sent"], ["Sent"]]


def test_dispatch_batch_hands_the_valid_wakeups_to_process_batch(monkeypatch):
    from chalicelib.workers import registry

    registry.load_workers()
    seen = []
    real = registry.WORKERS["deliveries"]
    monkeypatch.setitem(registry.WORKERS, "deliveries", registry.QueueWorker(
        "deliveries", real.process, real.find_due,
        process_batch=lambda ids: seen.append(ids) or {i: "Sent" for i in ids}))
    outcome = dispatch.dispatch_batch("deliveries", ['{"id": 4}', "junk", '{"id": 9}'])
    assert seen == [[4, 9]] and outcome == {"poison": 1, "done": 2}


def test_the_running_stack_delivers_a_burst_in_batches(api, tenant, mx, monkeypatch):
    """Through the HTTP API and the local queue: the batch path end to end."""
    calls = []
    real = worker.process_batch

    def spy(ids):
        calls.append(len(ids))
        return real(ids)

    monkeypatch.setattr(worker, "process_batch", spy)
    from tests.support import Api

    addresses = [rcpt(f"burst{i}") for i in range(40)]
    data = Api.data(api.post("/api/v2/server/messages/batch", {"messages": [
        {"from": f"App <app@{tenant.domain}>", "to": [to], "subject": "s", "text_body": "b"}
        for to in addresses]}, server_key=tenant.api_key))
    ids = [m["data"]["recipients"][0]["id"] for m in data["messages"]]
    for message_id in ids:
        wait_status(api, tenant, message_id, "Sent")
    assert [len(mx.received_for(to)) for to in addresses] == [1] * 40
    assert calls and max(calls) > 1


def test_an_sqs_batch_reaches_the_lambda_handler_as_one_delivery_batch(api, tenant, mx, db,
                                                                      monkeypatch):
    import json

    import app as app_module

    ids, addresses = park_many(db, api, tenant, 3)
    batches = []
    real = worker.process_batch

    def spy(row_ids):
        batches.append(list(row_ids))
        return real(row_ids)

    monkeypatch.setattr(worker, "process_batch", spy)
    arn = f"arn:aws:sqs:us-east-1:123456789012:{app_module._PREFIX}deliveries"
    event = {"Records": [{"messageId": str(i), "receiptHandle": "h", "body": json.dumps(
        {"id": message_id}), "attributes": {}, "messageAttributes": {}, "md5OfBody": "",
        "eventSource": "aws:sqs", "eventSourceARN": arn, "awsRegion": "us-east-1"}
        for i, message_id in enumerate(ids + [ids[1]])]}
    assert app_module.deliveries_worker(event, None) == {"done": 4}
    assert batches == [ids + [ids[1]]]
    assert [message(api, tenant, i)["status"] for i in ids] == ["Sent"] * 3
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 1]
    assert mx.connections == 1
