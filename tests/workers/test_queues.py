"""The queue port: SQS through moto with real Lambda event shapes, the in-process scheduler,
poison messages, and the sweeper."""
from __future__ import annotations

import json
import threading
import time

import boto3
import pytest
from moto import mock_aws

from chalicelib import queues
from chalicelib.workers import dispatch, registry, sweeper

PREFIX = "test-es-"


@pytest.fixture
def sqs(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        urls = {name: client.create_queue(QueueName=PREFIX + name)["QueueUrl"]
                for name in queues.QUEUE_NAMES}
        yield client, urls


@pytest.fixture
def recording_worker(monkeypatch):
    """Replace the deliveries worker with one that records the row ids it is given.

    Its due rows are seen only from the test's own thread: a local stack started by another
    test may still be sweeping in the background, and must not find them too."""
    registry.load_workers()
    seen: list[int] = []
    test_thread = threading.get_ident()

    def find_due(db, limit, grace):
        return [101, 102] if threading.get_ident() == test_thread else []

    def process(row_id: int) -> None:
        if row_id == 13:
            raise RuntimeError("transient failure")
        seen.append(row_id)

    monkeypatch.setitem(registry.WORKERS, "deliveries",
                        registry.QueueWorker("deliveries", process, find_due))
    return seen


def _lambda_event(messages, arn):
    return {"Records": [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"],
                         "body": m["Body"], "attributes": {}, "messageAttributes": {},
                         "md5OfBody": m["MD5OfBody"], "eventSource": "aws:sqs",
                         "eventSourceARN": arn, "awsRegion": "us-east-1"} for m in messages]}


def test_sqs_port_caps_delay_at_900_seconds(sqs):
    client, urls = sqs
    port = queues.SqsPort(client=client, prefix=PREFIX)
    port.send("deliveries", {"id": 7}, delay_seconds=5000)
    port.send("deliveries", {"id": 8}, delay_seconds=0)
    # moto honours DelaySeconds: only the undelayed message is visible now.
    received = client.receive_message(QueueUrl=urls["deliveries"], MaxNumberOfMessages=10)
    assert [json.loads(m["Body"]) for m in received["Messages"]] == [{"id": 8}]
    sent = []
    port._client = type("Spy", (), {"send_message": lambda self, **kw: sent.append(kw),
                                    "get_queue_url": client.get_queue_url})()
    port.send("deliveries", {"id": 9}, delay_seconds=3600)
    assert sent[0]["DelaySeconds"] == 900


def test_lambda_handler_processes_each_record_and_survives_poison(sqs, recording_worker, monkeypatch):
    client, urls = sqs
    for body in ('{"id": 1}', "not json", '{"id": 13}', '{"nope": 1}', '{"id": -4}', '{"id": 2}'):
        client.send_message(QueueUrl=urls["deliveries"], MessageBody=body)
    messages = client.receive_message(QueueUrl=urls["deliveries"], MaxNumberOfMessages=10)["Messages"]
    assert len(messages) == 6
    import app as app_module

    # The ARN names the deployed queue (the app's prefix), whatever moto called it.
    arn = f"arn:aws:sqs:us-east-1:123456789012:{app_module._PREFIX}deliveries"
    outcome = app_module.deliveries_worker(_lambda_event(messages, arn), None)
    assert sorted(recording_worker) == [1, 2]
    assert outcome == {"done": 2, "poison": 3, "failed": 1}


def test_dispatch_never_raises():
    assert dispatch.dispatch("no-such-queue", '{"id": 1}') == "unknown-queue"
    assert dispatch.parse_wakeup('{"id": true}') is None
    assert dispatch.parse_wakeup('{"id": "3"}') is None
    assert dispatch.parse_wakeup('{"id": 3}') == 3


def test_local_port_runs_due_messages_in_time_order():
    port = queues.LocalPort(workers=1)
    seen: list[tuple[str, int]] = []
    done = threading.Event()

    def handle(queue, body):
        seen.append((queue, json.loads(body)["id"]))
        if len(seen) == 3:
            done.set()

    port.start(handle)
    try:
        port.send("webhooks", {"id": 3}, delay_seconds=0.3)
        port.send("deliveries", {"id": 1})
        port.send("deliveries", {"id": 2}, delay_seconds=0.1)
        assert done.wait(10)
    finally:
        port.stop()
    assert seen == [("deliveries", 1), ("deliveries", 2), ("webhooks", 3)]


def test_enqueue_failure_is_not_fatal(monkeypatch):
    class Broken:
        def send(self, *a, **k):
            raise ConnectionError("queue down")

    monkeypatch.setattr(queues, "_port", Broken())
    queues.enqueue("deliveries", 5)  # logged; the sweeper finds the row later


def test_sweeper_enqueues_due_rows(recording_worker, monkeypatch, database):
    sent = []

    class Recorder:
        def send(self, queue, body, delay_seconds=0):
            sent.append((queue, body["id"]))

    monkeypatch.setattr(queues, "_port", Recorder())
    counts = sweeper.sweep()
    assert ("deliveries", 101) in sent and ("deliveries", 102) in sent
    assert counts["deliveries"] == 2


def test_local_port_stop_leaves_no_thread():
    port = queues.LocalPort(workers=2)
    port.start(lambda q, b: None)
    port.stop()
    time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name == "queue-scheduler" and t.is_alive()
                and t is port._thread]


def test_enqueue_many_sends_sqs_batches_of_ten(sqs, monkeypatch):
    client, urls = sqs
    monkeypatch.setattr(queues, "_port", queues.SqsPort(client=client, prefix=PREFIX))
    calls = []
    real = client.send_message_batch

    def counting(**kwargs):
        calls.append(len(kwargs["Entries"]))
        return real(**kwargs)

    client.send_message_batch = counting
    queues.enqueue_many("bulk", list(range(1, 24)))
    assert calls == [10, 10, 3]
    received = set()
    while True:
        got = client.receive_message(QueueUrl=urls["bulk"], MaxNumberOfMessages=10)
        if not got.get("Messages"):
            break
        for m in got["Messages"]:
            received.add(json.loads(m["Body"])["id"])
            client.delete_message(QueueUrl=urls["bulk"], ReceiptHandle=m["ReceiptHandle"])
    assert received == set(range(1, 24))


def test_wake_ups_of_one_transaction_go_out_together_after_its_commit(sqs, monkeypatch,
                                                                      database):
    """23 wake-ups (some delayed) enqueued in one session: nothing before the commit, then
    three SendMessageBatch calls on that queue, each message with its own delay."""
    from tests.support import all_tenants

    client, urls = sqs
    monkeypatch.setattr(queues, "_port", queues.SqsPort(client=client, prefix=PREFIX))
    calls, single = [], []
    real = client.send_message_batch

    def counting(**kwargs):
        calls.append([entry["DelaySeconds"] for entry in kwargs["Entries"]])
        return real(**kwargs)

    client.send_message_batch = counting
    client.send_message = lambda **kwargs: single.append(kwargs)
    with all_tenants() as db:
        for row_id in range(1, 24):
            queues.enqueue_after_commit(db, "deliveries", row_id, 0 if row_id <= 20 else 60.2)
        queues.enqueue_after_commit(db, "webhooks", 99)
        assert calls == [] and single == []  # not before the commit
    assert calls == [[0] * 10, [0] * 10, [61, 61, 61]]
    assert [json.loads(s["MessageBody"]) for s in single] == [{"id": 99}]  # one alone
    visible = client.receive_message(QueueUrl=urls["deliveries"], MaxNumberOfMessages=10)
    assert len(visible["Messages"]) == 10  # the delayed three are not visible yet

    # A rolled-back transaction sends nothing.
    with pytest.raises(RuntimeError):
        with all_tenants() as db:
            queues.enqueue_after_commit(db, "deliveries", 500)
            raise RuntimeError("rolled back")
    assert len(calls) == 3 and len(single) == 1


def test_schedule_takes_one_queues_due_wake_ups_in_time_order_and_keeps_the_rest():
    from chalicelib.queues import Schedule

    schedule = Schedule()
    schedule.push_many("a", ["a1", "a2"], [0.0, 0.0])
    schedule.push_many("b", ["b1"], [0.0])
    schedule.push_many("a", ["a3", "a4", "later"], [0.0, 0.0, 3600.0])
    assert schedule.take(3, timeout=0) == ("a", ["a1", "a2", "a3"])
    assert schedule.take(10, timeout=0) == ("b", ["b1"])  # set aside, then first again
    assert schedule.take(10, timeout=0) == ("a", ["a4"])  # the one not due stays
    assert schedule.pending() == 1
    assert schedule.take(10, timeout=0) is None
