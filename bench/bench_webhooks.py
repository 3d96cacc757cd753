"""Webhook deliveries per second to a loopback receiver, with signing, against a minimal
reference loop in the same run.

Ours: ``webhook_delivery.process(row_id)`` for each queue row, exactly what a queue worker
does (load the row, claim it with a conditional UPDATE, check the URL, sign, pinned POST, then
delete the row and write the attempt log).
Reference: claim a row with SELECT ... FOR UPDATE SKIP LOCKED, sign with ``cryptography``,
POST over a keep-alive ``requests`` session, delete the row, commit. It writes no log, checks
no URL and keeps no claim, so it is an upper bound, not a like-for-like twin.

Both run single-threaded against the same receiver and the same rows (same body); rows are
inserted before each timed phase. Aim: ours at least half the reference's rate.

Run: .venv/bin/python bench/bench_webhooks.py [--rows 200] [--rounds 5]
     (BENCH_DATABASE_URL picks the database; its public schema is dropped and re-created)

Latency mode (issue 33 item 5): ``--delay-ms 100 [--rows 400] [--threads 4]`` puts the
receiver behind a response delay (what a receiver 50-300 ms away costs a POST) and drives
the rows the way a worker process does: ``--threads`` worker threads, each taking batches
of 10 wake-ups and handing them to ``batch.process_batch``. It prints webhooks/s with
WEBHOOKS_CONCURRENCY=1 (each worker thread one POST at a time: the behaviour before) and
with the default (or ``--concurrency``), the ratio, and what the receiver saw (requests in
flight at once, TCP connections).

For other benches (bench_latency.py): ``measure(delay_ms, n, ...) -> dict`` runs one such
measurement against a receiver of its own; see its docstring."""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import TABLE_HEAD, bench_database_url, prepare_database, row  # noqa: E402


def setup_database(url: str) -> None:
    prepare_database(url, WEBHOOKS_ALLOW_PRIVATE_TARGETS="true", QUEUE_BACKEND="local")
    from chalicelib.db import migrate

    migrate.upgrade(url)


def make_webhook(target_url: str) -> tuple[int, int, str]:
    from chalicelib.db import session_scope
    from chalicelib.db.models import Message, Organization, Server
    from chalicelib.services.messages import events
    from chalicelib.services.webhooks import hooks, payload

    with session_scope() as db:
        suffix = uuid.uuid4().hex[:8]  # a webhook (and tenant) of its own for every call
        org = Organization(name="Bench", permalink=f"bench-{suffix}")
        db.add(org)
        db.flush()
        srv = Server(organization_id=org.id, name="Main", permalink="main")
        db.add(srv)
        db.flush()
        hook = hooks.create(db, srv, name="bench", url=target_url, events_=[],
                               headers={"X-Secret": "bench-secret"})
        message = Message(server_id=srv.id, token=uuid.uuid4().hex, rcpt_to="a@example.net",
                          mail_from="b@example.com", scope="outgoing")
        db.add(message)
        db.flush()
        record = events.MessageEvent(message_id=message.id, server_id=srv.id,
                                     event="MessageSent", uuid=str(uuid.uuid4()),
                                     details="250 OK")
        db.add(record)
        db.flush()
        body = payload.build_body("MessageSent", record.uuid, int(time.time()),
                                  payload.message_fields(message), record.details)
        return srv.id, hook.id, body


def insert_rows(server_id: int, webhook_id: int, body: str, count: int) -> list[int]:
    from chalicelib import clock
    from chalicelib.db import session_scope
    from chalicelib.db.models import WebhookRequest

    with session_scope() as db:
        now = clock.now()
        rows = [WebhookRequest(server_id=server_id, webhook_id=webhook_id, event="MessageSent",
                               uuid=str(uuid.uuid4()), body=body, next_attempt_at=now,
                               created_at=now) for _ in range(count)]
        db.add_all(rows)
        db.flush()
        return [r.id for r in rows]


def ours(ids: list[int]) -> float:
    from chalicelib.services.webhooks import deliver

    started = time.perf_counter()
    for row_id in ids:
        outcome = deliver.process(row_id)
        assert outcome == "delivered", outcome
    return len(ids) / (time.perf_counter() - started)


def reference(url: str, target_url: str, count: int) -> float:
    import requests
    from sqlalchemy import create_engine, text

    from chalicelib import clock
    from chalicelib.services.security import keys, signing

    key = keys.signing_key()
    engine = create_engine(url)
    http = requests.Session()
    skip_locked = " FOR UPDATE SKIP LOCKED" if url.startswith("postgresql") else ""
    done = 0
    started = time.perf_counter()
    with engine.connect() as conn:
        while True:
            with conn.begin():
                found = conn.execute(text(
                    "SELECT id, event, uuid, body FROM webhook_requests "
                    "WHERE next_attempt_at <= :now ORDER BY id LIMIT 1"
                    + skip_locked), {"now": clock.now()}).first()
                if found is None:
                    break
                body = found.body.encode()
                signature = signing.sign_body(key, body)
                response = http.post(target_url, data=body, timeout=15, headers={
                    "Content-Type": "application/json", "X-Service-Event": found.event,
                    "X-Service-UUID": found.uuid, "X-Service-Signature": signature,
                    "X-Secret": "bench-secret"})
                assert response.status_code == 200
                conn.execute(text("DELETE FROM webhook_requests WHERE id = :id"),
                             {"id": found.id})
            done += 1
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert done == count, (done, count)
    return done / elapsed


_prepared: set[str] = set()


def measure(delay_ms: float = 100.0, n: int = 400, concurrency: int | None = None,
            threads: int = 4, database_url: str | None = None, prepare: bool = True) -> dict:
    """Signed webhooks per second to a receiver that answers after ``delay_ms``: ``n`` queue
    rows (one event each, one webhook) delivered by ``threads`` worker threads taking
    batches of 10 wake-ups, as a worker process does (``batch.process_batch``), with
    WEBHOOKS_CONCURRENCY=``concurrency`` (None: the setting's default; 1: one POST at a time
    per worker thread, the behaviour before).

    ``database_url`` (default BENCH_DATABASE_URL) is emptied and migrated on the first call
    in a process unless ``prepare`` is False (the caller has set DATABASE_URL up; its
    webhooks must then allow private targets: WEBHOOKS_ALLOW_PRIVATE_TARGETS=true).
    Returns {"webhooks_per_s", "seconds", "n", "delay_ms", "concurrency", "threads",
    "max_in_flight" and "connections" (as the receiver saw them), "requests"}."""
    import threading

    from chalicelib.config import get_settings
    from chalicelib.services.webhooks import batch, http
    from tests.receivers import Receiver, Reply

    url = database_url or bench_database_url()
    if prepare and url not in _prepared:
        setup_database(url)
        _prepared.add(url)
    os.environ["WEBHOOKS_ALLOW_PRIVATE_TARGETS"] = "true"
    if concurrency is None:
        os.environ.pop("WEBHOOKS_CONCURRENCY", None)
    else:
        os.environ["WEBHOOKS_CONCURRENCY"] = str(concurrency)
    os.environ["WORKER_THREADS"] = str(threads)  # (sizes the kept connections per receiver)
    used = get_settings().webhooks_concurrency
    http.close_all()  # no connection kept from an earlier measurement
    with Receiver([Reply(200, delay=delay_ms / 1000.0)]) as receiver:
        server_id, webhook_id, body = make_webhook(receiver.url)
        ids = insert_rows(server_id, webhook_id, body, n)
        batches = [ids[i:i + 10] for i in range(0, len(ids), 10)]
        lock = threading.Lock()
        outcomes: list[str] = []

        def worker() -> None:
            while True:
                with lock:
                    if not batches:
                        return
                    taken = batches.pop(0)
                results = batch.process_batch(taken)
                with lock:
                    outcomes.extend(results.values())

        started = time.perf_counter()
        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - started
        assert outcomes.count("delivered") == n, sorted(set(outcomes))
        seen = {"requests": len(receiver.requests), "max_in_flight": receiver.max_in_flight,
                "connections": receiver.connections}
    http.close_all()
    return {"webhooks_per_s": n / elapsed, "seconds": elapsed, "n": n, "delay_ms": delay_ms,
            "concurrency": used, "threads": threads, **seen}


def latency_main(args) -> None:
    url = bench_database_url()
    setup_database(url)
    _prepared.add(url)
    before_runs, after_runs = [], []
    for _ in range(args.rounds):  # alternate, so that machine noise hits both alike
        before_runs.append(measure(args.delay_ms, args.rows, 1, args.threads, url))
        after_runs.append(measure(args.delay_ms, args.rows, args.concurrency, args.threads, url))
    before = max(before_runs, key=lambda r: r["webhooks_per_s"])
    after = max(after_runs, key=lambda r: r["webhooks_per_s"])
    print(f"webhook deliveries, receiver answering after {args.delay_ms:g} ms, {args.rows} rows, "
          f"{args.threads} worker threads x batches of 10, best of {args.rounds}, "
          f"{url.split('://')[0]}, RSA-2048 signatures")
    print(TABLE_HEAD)
    print(row(f"webhooks/s at a {args.delay_ms:g} ms receiver, WEBHOOKS_CONCURRENCY="
              f"{after['concurrency']} vs 1", f"{after['webhooks_per_s']:.0f}/s",
              f"{before['webhooks_per_s']:.0f}/s",
              after["webhooks_per_s"] / before["webhooks_per_s"], "keeps pace with deliveries"))
    for name, r in (("before (1)", before), (f"after ({after['concurrency']})", after)):
        print(f"  {name}: {r['webhooks_per_s']:.0f}/s, {r['seconds']:.2f} s, at most "
              f"{r['max_in_flight']} in flight at the receiver, {r['connections']} TCP "
              f"connections for {r['requests']} requests")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200, help="deliveries per round")
    ap.add_argument("--rounds", type=int, default=5, help="best of N rounds per side")
    ap.add_argument("--delay-ms", type=float, default=None,
                    help="latency mode: the receiver answers after this many ms")
    ap.add_argument("--threads", type=int, default=4, help="latency mode: worker threads")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="latency mode: WEBHOOKS_CONCURRENCY of the 'after' side "
                         "(default: the setting's default)")
    args = ap.parse_args()
    if args.delay_ms is not None:
        latency_main(args)
        return

    url = bench_database_url()
    setup_database(url)
    from tests.receivers import Receiver

    with Receiver([200]) as receiver:
        server_id, webhook_id, body = make_webhook(receiver.url)
        best_ours = best_ref = 0.0
        for _ in range(args.rounds):
            # Alternate sides so that machine noise hits both alike.
            insert_rows(server_id, webhook_id, body, args.rows)
            best_ref = max(best_ref, reference(url, receiver.url, args.rows))
            ids = insert_rows(server_id, webhook_id, body, args.rows)
            best_ours = max(best_ours, ours(ids))
        received = len(receiver.requests)
    assert received == 2 * args.rounds * args.rows, received
    print(f"webhook deliveries, {args.rows} rows x best of {args.rounds}, "
          f"{url.split('://')[0]}, body {len(body)} bytes, RSA-2048 signatures")
    print(TABLE_HEAD)
    print(row("webhook deliveries/s (signed, loopback receiver)", f"{best_ours:.0f}/s",
              f"{best_ref:.0f}/s", best_ours / best_ref, ">= 0.5"))


if __name__ == "__main__":
    main()
