"""Many webhook POSTs in flight at once (services/webhooks/concurrency.py, batch.py, http.py),
seen from real receivers on loopback: a batch to a slow receiver is answered side by side;
keep-alive connections are shared by the pool's threads, not one per thread; duplicate
wake-ups still post each row once; one message's events to one webhook stay in order; a
receiver that hangs holds up only its own rows; a private target stays refused while
connections to it are kept; each POST of a batch writes its webhook.attempt line. Nothing
here measures time: the receivers count what they saw."""
from __future__ import annotations

import io
import json
import threading

import pytest

from chalicelib import observability
from chalicelib.services.webhooks import batch as webhook_batch
from chalicelib.services.webhooks import deliver as single
from tests.receivers import Receiver, Reply
from tests.support.webhooks import create_webhook, log_rows, queue_rows
from tests.support.webhooks import emit_events


@pytest.fixture(autouse=True)
def private_targets(monkeypatch):
    monkeypatch.setenv("WEBHOOKS_ALLOW_PRIVATE_TARGETS", "true")
    monkeypatch.setenv("WEBHOOKS_CONCURRENCY", "16")


def _one_event_each(tenant, hook_id: int, count: int) -> list[int]:
    return emit_events(tenant, hook_id, [(i, "MessageSent") for i in range(count)])


def test_a_batch_to_a_slow_receiver_is_posted_side_by_side(api, tenant):
    with Receiver([Reply(200, delay=0.3)]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        ids = _one_event_each(tenant, hook["id"], 10)
        assert set(webhook_batch.process_batch(ids).values()) == {"delivered"}
        assert len(rx.requests) == 10
        # One after another, the receiver would never answer two at once.
        assert rx.max_in_flight > 1
    assert queue_rows(hook["id"]) == []
    assert len(log_rows(hook["id"])) == 10


def test_keep_alive_connections_are_shared_by_the_pool_threads(api, tenant):
    with Receiver([Reply(200, delay=0.1)]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        # A lone wake-up first (posted in the worker thread): the receiver's pool it makes
        # must keep as many connections as the batches after it have POSTs in flight.
        [lone] = _one_event_each(tenant, hook["id"], 1)
        assert single.process(lone) == "delivered"
        for _ in range(3):
            ids = _one_event_each(tenant, hook["id"], 10)
            assert set(webhook_batch.process_batch(ids).values()) == {"delivered"}
        assert len(rx.requests) == 31 and rx.max_in_flight > 1
        # Never more connections than POSTs in flight at once (a batch: 10), however many
        # threads of the pool took the later batches' rows: they reuse the kept ones.
        assert rx.connections <= 10


def test_duplicate_wakeups_side_by_side_post_each_row_once(api, tenant):
    with Receiver([Reply(200, delay=0.2)]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        ids = _one_event_each(tenant, hook["id"], 8)
        # The same rows woken three times at once (two in reverse), each a batch in flight.
        batches = [ids, list(reversed(ids)), ids[::2] + ids[1::2]]
        threads = [threading.Thread(target=webhook_batch.process_batch, args=(b,))
                   for b in batches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        uuids = [r.headers["x-service-uuid"] for r in rx.requests]
        assert len(uuids) == len(set(uuids)) == 8  # each once, never two at once or again
        assert rx.max_in_flight > 1
        assert set(webhook_batch.process_batch(ids).values()) == {"gone"}
    assert queue_rows(hook["id"]) == []
    assert [(r.attempt, r.success) for r in log_rows(hook["id"])] == [(1, True)] * 8


def test_one_messages_events_stay_in_order_while_others_overlap(api, tenant):
    with Receiver([Reply(200, delay=0.1)]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        plan = [(0, "MessageDelayed")] + [(i, "MessageSent") for i in range(1, 6)] + \
            [(0, "MessageDelayed"), (0, "MessageSent")]
        ids = emit_events(tenant, hook["id"], plan)
        assert set(webhook_batch.process_batch(ids).values()) == {"delivered"}
        seen = [(r.json()["payload"]["message"]["id"], r.json()["event"]) for r in rx.requests]
        message_0 = next(m for m, e in seen if e == "MessageDelayed")
        first = [r for r, (m, _) in zip(rx.requests, seen) if m == message_0]
        assert [r.json()["event"] for r in first] == \
            ["MessageDelayed", "MessageDelayed", "MessageSent"]
        assert len(rx.requests) == 8 and rx.max_in_flight > 1


def test_a_receiver_that_hangs_holds_up_only_its_own_rows(api, tenant, monkeypatch):
    monkeypatch.setenv("WEBHOOKS_TIMEOUT_SECONDS", "90")  # longer than the wait below
    release = threading.Event()
    with Receiver([Reply(200, hold=release)]) as hanging, Receiver([200]) as fine:
        slow_hook = create_webhook(api, tenant, hanging.url)
        fast_hook = create_webhook(api, tenant, fine.url)
        ids = _one_event_each(tenant, slow_hook["id"], 5)  # each event: a row per webhook
        fast_ids = sorted(row.id for row in queue_rows(fast_hook["id"]))
        assert len(fast_ids) == 5
        results: dict = {}
        worker = threading.Thread(target=lambda: results.update(
            webhook_batch.process_batch(sorted(ids + fast_ids))))
        worker.start()
        try:
            # The hanging receiver's rows come first in the batch; the others still arrive.
            fine.wait_for(5)
            assert len(hanging.requests) >= 1 and not results
        finally:
            release.set()
            worker.join()
    assert set(results.values()) == {"delivered"} and len(results) == 10


def test_a_private_target_is_refused_even_with_connections_kept_to_it(api, tenant,
                                                                      monkeypatch):
    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
        ids = _one_event_each(tenant, hook["id"], 4)
        assert set(webhook_batch.process_batch(ids).values()) == {"delivered"}
        kept = rx.connections
        assert kept >= 1 and len(rx.requests) == 4
        monkeypatch.setenv("WEBHOOKS_ALLOW_PRIVATE_TARGETS", "false")
        ids = _one_event_each(tenant, hook["id"], 4)
        # The address is checked for every attempt before a kept connection is picked.
        assert set(webhook_batch.process_batch(ids).values()) == {"retry"}
        assert len(rx.requests) == 4 and rx.connections == kept
    assert all(r.error.startswith("refused:") for r in log_rows(hook["id"])[4:])


def test_every_post_of_a_batch_writes_its_attempt_line(api, tenant, monkeypatch):
    monkeypatch.setenv("LOG_FORMAT", "json")
    buffer = io.StringIO()
    restore = observability.capture(buffer)
    try:
        with Receiver(answer=lambda r: 500 if r.json()["event"] == "MessageDelayed"
                      else 200) as rx:
            hook = create_webhook(api, tenant, rx.url)
            ids = emit_events(tenant, hook["id"], [(0, "MessageDelayed"), (1, "MessageSent"),
                                               (2, "MessageSent")])
            webhook_batch.process_batch(ids)
    finally:
        restore()
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()
             if line.startswith("{")]
    attempts = sorted((r["webhook_request_id"], r["result"], r["level"]) for r in lines
                      if r.get("event") == "webhook.attempt")
    assert attempts == [(ids[0], "retry", "WARNING"), (ids[1], "delivered", "INFO"),
                        (ids[2], "delivered", "INFO")]
