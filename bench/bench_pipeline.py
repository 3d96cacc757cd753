"""The whole pipeline on PostgreSQL, measured from outside, against a minimal reference loop
in the same run.

Ours: N messages sent through ``POST /api/v2/server/messages/batch`` (entries of 500) to the
local stack's HTTP API; each is DKIM-signed and delivered by queue worker *processes* to a
loopback MX (aiosmtpd), and its ``MessageSent`` event is POSTed, signed, to a webhook receiver.
The clock runs from the first POST until the receiver has the N-th webhook. Worker processes
stand in for Lambda concurrency: each takes up to 10 wake-ups at a time from one shared queue
(as an SQS batch) and hands them to the same dispatcher the Lambda handlers use.

Reference: one process, one loop over the same number of already-accepted messages on the
same database, MX and receiver: claim one row (SELECT ... FOR UPDATE SKIP LOCKED), DKIM-sign,
send on one reused SMTP connection, record the attempt and status, POST a signed webhook on a
keep-alive session, commit. It skips acceptance, so it is a strict bar.

Printed per worker count: messages/s, ratio to the reference, PostgreSQL commits per message
(``pg_stat_database.xact_commit`` delta on a database only this bench uses), WAL bytes per
message (``pg_current_wal_lsn`` delta: cluster-wide, so other users of the server add to it),
and CPU-ms per message in the API process and in the workers (split by queue).

Run: .venv/bin/python bench/bench_pipeline.py [--messages 1000] [--workers 1,2,4] [--rounds 1]
     BENCH_DATABASE_URL picks the database (its public schema is dropped and re-created; the
     default is a dedicated ``test_i16_pipeline`` database, created when missing)."""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_module
import smtplib
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import ADMIN_KEY, STACK_ENV, prepare_database  # noqa: E402

DEFAULT_URL = "postgresql+pg8000://postgres@127.0.0.1:5432/test_i16_pipeline"
BATCH = 500
SQS_BATCH = 10


# --------------------------------------------------------------------------- sinks (own process)

def sink_main(kind: str, ready, counts, stop) -> None:
    """The MX (kind "mx", ``counts[0]``: messages received) or the webhook receiver ("rx",
    ``counts[1]``: POSTs), each in a process of its own, so neither shares a GIL with the
    pipeline or with the other."""
    sys.path.insert(0, ROOT)
    from tests.mx import ScriptedMX
    from tests.receivers import Receiver

    if kind == "mx":
        sink = ScriptedMX().start()
        ready.send(sink.relay)
        received, index = sink.messages, 0
    else:
        sink = Receiver([200]).start()
        ready.send(sink.url)
        received, index = sink.requests, 1
    total = 0
    while not stop.is_set():
        counts[index] = total + len(received)
        if len(received) > 10000:  # keep memory flat over long runs
            total += len(received)
            received.clear()
        time.sleep(0.005)
    sink.stop()


# --------------------------------------------------------------------------- worker processes

class QueuePort:
    """Wake-ups go to one multiprocessing queue shared by every worker process (an SQS
    stand-in); a delayed one is sent when its delay is up."""

    def __init__(self, shared):
        self.shared = shared

    def send(self, queue: str, body: dict, delay_seconds: float = 0) -> None:
        import json

        item = (queue, json.dumps(body))
        if delay_seconds > 0:
            timer = threading.Timer(delay_seconds, self.shared.put, (item,))
            timer.daemon = True
            timer.start()
        else:
            self.shared.put(item)


def worker_main(shared, ready, stop, results) -> None:
    sys.path.insert(0, ROOT)
    from chalicelib import queues
    from chalicelib.workers import dispatch

    queues.set_port(QueuePort(shared))
    dispatch.load_workers()
    batch = getattr(dispatch, "dispatch_batch", None)
    cpu: dict[str, float] = {}
    handled: dict[str, int] = {}
    ready.release()
    while not stop.is_set():
        try:
            items = [shared.get(timeout=0.05)]
        except queue_module.Empty:
            continue
        while len(items) < SQS_BATCH:
            try:
                items.append(shared.get_nowait())
            except queue_module.Empty:
                break
        by_queue: dict[str, list[str]] = {}
        for name, body in items:
            by_queue.setdefault(name, []).append(body)
        for name, bodies in by_queue.items():
            started = time.thread_time()
            if batch is not None:
                batch(name, bodies)
            else:  # the per-record dispatcher (before batching existed)
                for body in bodies:
                    dispatch.dispatch(name, body)
            cpu[name] = cpu.get(name, 0.0) + time.thread_time() - started
            handled[name] = handled.get(name, 0) + len(bodies)
    from chalicelib.db import engine as engines

    # Close our connections: a backend's statistics reach pg_stat_database when it exits.
    for engine in (*engines._engines.values(), *engines._autocommit_engines.values()):
        engine.dispose()
    results.put((cpu, handled))


# --------------------------------------------------------------------------- measuring

def pg_figures(engine) -> tuple[int, int]:
    from sqlalchemy import text

    with engine.connect() as conn:
        commits = conn.execute(text(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )).scalar_one()
        wal = conn.execute(text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")
                           ).scalar_one()
    return int(commits), int(wal)


def settle_stats(engine) -> tuple[int, int]:
    """pg_stat counters are flushed by each backend when it goes idle (at most once a second)
    or exits: read them after a pause, from a fresh connection."""
    engine.dispose()
    time.sleep(1.5)
    return pg_figures(engine)


def wait_count(counts, index: int, target: int, timeout: float) -> float:
    deadline = time.perf_counter() + timeout
    while counts[index] < target:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"timed out: {counts[index]} of {target} "
                               f"{'messages' if index == 0 else 'webhooks'}")
        time.sleep(0.002)
    return time.perf_counter()


def entries(tenant, count: int, tag: str) -> list[dict]:
    return [{"from": f"App <app@{tenant.domain}>", "to": [f"user{i}@example.net"],
             "subject": f"Bench {tag} {i}", "text_body": "Hello from the pipeline bench.\n" * 10,
             "tag": tag} for i in range(count)]


def post_batches(api, tenant, count: int, tag: str) -> None:
    for start in range(0, count, BATCH):
        response = api.post("/api/v2/server/messages/batch",
                            {"messages": entries(tenant, min(BATCH, count - start), tag)},
                            headers={"X-Server-API-Key": tenant.api_key})
        data = response.json()["data"]
        assert response.status_code == 200 and data["failed"] == 0, response.text[:500]


def reference(engine, relay: str, hook_url: str, domain, count: int) -> float:
    """The minimal loop over ``count`` accepted messages tagged 'ref'."""
    import requests
    from sqlalchemy import text

    from chalicelib import clock
    from chalicelib.services.dkim import signer
    from chalicelib.services.security import keys, signing

    key = keys.signing_key()
    host, port = relay.split(":")
    smtp = smtplib.SMTP(host, int(port), local_hostname="mx.bench.test")
    session = requests.Session()
    done, started = 0, time.perf_counter()
    with engine.connect() as conn:
        while True:
            with conn.begin():
                found = conn.execute(text(
                    "SELECT m.id, m.token, m.rcpt_to, s.raw FROM messages m JOIN submissions s "
                    "ON s.id = m.submission_id WHERE m.status = 'Pending' AND m.tag = 'ref' "
                    "AND m.next_attempt_at <= :now ORDER BY m.id LIMIT 1 "
                    "FOR UPDATE OF m SKIP LOCKED"), {"now": clock.now()}).first()
                if found is None:
                    break
                signed = signer.sign_message(found.raw, domain=domain[0],
                                                   selector=domain[1], private_pem=domain[2])
                code, reply = smtp.sendmail(f"{found.token}@rp.mx.bench.test", [found.rcpt_to],
                                            signed) or (250, b"")
                now = clock.now()
                conn.execute(text(
                    "INSERT INTO deliveries (message_id, status, stage, host, code, tls, "
                    "duration_ms, created_at) VALUES (:id, 'Sent', 'done', :host, 250, false, "
                    "0, :now)"), {"id": found.id, "host": relay, "now": now})
                conn.execute(text("UPDATE messages SET status = 'Sent', sent_at = :now, "
                                  "next_attempt_at = NULL WHERE id = :id"),
                             {"id": found.id, "now": now})
                body = (f'{{"event":"MessageSent","message":{{"id":{found.id},'
                        f'"token":"{found.token}"}}}}').encode()
                answer = session.post(hook_url, data=body, headers={
                    "Content-Type": "application/json",
                    "X-Service-Signature": signing.sign_body(key, body)})
                assert answer.status_code == 200
            done += 1
    elapsed = time.perf_counter() - started
    smtp.quit()
    assert done == count, (done, count)
    return elapsed


def start_sinks(ctx):
    """The MX and the webhook receiver, each in a process of its own; returns (processes,
    counts, stop event, MX relay host:port, receiver URL)."""
    stop = ctx.Event()
    counts = ctx.Array("q", 2, lock=False)
    sinks, addresses = [], []
    for kind in ("mx", "rx"):
        ready_recv, ready_send = ctx.Pipe(duplex=False)
        sinks.append(ctx.Process(target=sink_main, args=(kind, ready_send, counts, stop),
                                 daemon=True))
        sinks[-1].start()
        addresses.append(ready_recv.recv())
    return sinks, counts, stop, addresses[0], addresses[1]


def prepare_world(url: str):
    """The database (created when missing, emptied) and the sinks; the app's environment
    pointed at them. Returns (spawn context, sink processes, counts, stop event, MX relay,
    receiver URL)."""
    ensure_database(url)
    ctx = mp.get_context("spawn")
    sinks, counts, stop, relay, hook_url = start_sinks(ctx)
    prepare_database(url, **STACK_ENV, DELIVERY_RELAY=relay, WEBHOOKS_ALLOW_PRIVATE_TARGETS="true",
                     TRACKING_MACHINE_SECONDS="0")
    return ctx, sinks, counts, stop, relay, hook_url


def start_stack(hook_url: str):
    """The local stack (its queue a NullPort until a phase starts) and a tenant whose webhook
    receives every MessageSent; returns (stack, admin Api client, tenant)."""
    from app import app
    from bench.common import NullPort
    from chalicelib import queues
    from chalicelib.local.stack import LocalStack
    from tests.support import Api, free_port, make_tenant

    stack = LocalStack(app, http_port=0, smtp_port=free_port(), sweep_interval=3600).start()
    queues.set_port(NullPort())
    try:
        api = Api(stack.base_url, ADMIN_KEY)
        tenant = make_tenant(api)
        api.post(tenant.server_path + "/webhooks",
                 {"name": "bench", "url": hook_url, "events": ["MessageSent"]}).raise_for_status()
    except BaseException:
        stack.stop()
        raise
    return stack, api, tenant


def run_workers(ctx, api, tenant, counts, workers: int, n: int, tag: str,
                before: tuple[int, int]):
    """One timed phase: ``workers`` worker processes, ``n`` messages tagged ``tag`` posted in
    batches, until the MX has them and the receiver their webhooks (``before``: what the
    sinks had counted already). Returns (seconds, API CPU seconds, worker CPU seconds per
    queue, wake-ups handled per queue)."""
    from bench.common import NullPort
    from chalicelib import queues

    shared, stop, ready, results = ctx.Queue(), ctx.Event(), ctx.Semaphore(0), ctx.Queue()
    procs = [ctx.Process(target=worker_main, args=(shared, ready, stop, results), daemon=True)
             for _ in range(workers)]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.acquire()
    queues.set_port(QueuePort(shared))
    cpu0 = time.process_time()
    started = time.perf_counter()
    post_batches(api, tenant, n, tag)
    accept_cpu = time.process_time() - cpu0
    wait_count(counts, 0, before[0] + n, 600)
    end = wait_count(counts, 1, before[1] + n, 600)
    time.sleep(0.5)  # the last outcome's commit follows its POST
    stop.set()
    worker_cpu: dict[str, float] = {}
    handled: dict[str, int] = {}
    for _ in procs:
        cpu, done = results.get(timeout=60)
        for k, v in cpu.items():
            worker_cpu[k] = worker_cpu.get(k, 0.0) + v
        for k, v in done.items():
            handled[k] = handled.get(k, 0) + v
    for proc in procs:
        proc.join(timeout=30)
    queues.set_port(NullPort())
    return end - started, accept_cpu, worker_cpu, handled


def ensure_database(url: str) -> None:
    from sqlalchemy import create_engine, text

    base, _, name = url.rpartition("/")
    admin = create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                            {"n": name}).first():
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    assert url.startswith("postgresql"), "the pipeline bench measures PostgreSQL"
    ctx, sinks, counts, stop_sinks, relay, hook_url = prepare_world(url)
    from sqlalchemy import create_engine

    from chalicelib.db import migrate

    migrate.upgrade(url)
    from bench.common import NullPort
    from chalicelib import queues

    stack, api, tenant = start_stack(hook_url)
    engine = create_engine(url)
    lines = []
    try:
        from chalicelib.db import session_scope
        from chalicelib.db.models import Domain
        from chalicelib.services.dkim import keys as dkim_keys
        from sqlalchemy import select

        with session_scope() as db:
            d = db.scalars(select(Domain).where(Domain.name == tenant.domain)).one()
            domain = (d.name, d.dkim_selector, dkim_keys.private_key(d.dkim_private_key_encrypted))
        n = args.messages
        sent = hooks = 0
        for round_no in range(args.rounds):
            # --- reference -------------------------------------------------------------
            queues.set_port(NullPort())
            post_batches(api, tenant, n, "ref")
            c0, w0 = settle_stats(engine)
            cpu0 = time.process_time()
            ref_seconds = reference(engine, relay, hook_url, domain, n)
            ref_cpu = time.process_time() - cpu0
            c1, w1 = settle_stats(engine)
            sent, hooks = sent + n, hooks + n
            ref_rate = n / ref_seconds
            lines.append(f"| reference loop | {n / ref_seconds:.0f}/s | 1.00 | "
                         f"{(c1 - c0) / n:.2f} | {(w1 - w0) / n:.0f} | {1000 * ref_cpu / n:.2f} (whole loop) | — |")
            for workers in [int(w) for w in args.workers.split(",")]:
                c0, w0 = settle_stats(engine)
                run = run_workers(ctx, api, tenant, counts, workers, n, f"r{round_no}w{workers}",
                                  (sent, hooks))
                seconds, accept_cpu, worker_cpu, handled = run
                sent, hooks = sent + n, hooks + n
                c1, w1 = settle_stats(engine)
                check(engine, f"r{round_no}w{workers}", n)
                rate = n / seconds
                lines.append(
                    f"| pipeline, {workers} worker process{'es' if workers > 1 else ''} | "
                    f"{rate:.0f}/s | {rate / ref_rate:.2f} | {(c1 - c0) / n:.2f} | "
                    f"{(w1 - w0) / n:.0f} | {1000 * accept_cpu / n:.2f} / "
                    f"{1000 * worker_cpu.get('deliveries', 0) / n:.2f} / "
                    f"{1000 * worker_cpu.get('webhooks', 0) / n:.2f} | "
                    f"{handled.get('deliveries', 0)} / {handled.get('webhooks', 0)} |")
    finally:
        stack.stop()
        stop_sinks.set()
        for sink in sinks:
            sink.join(timeout=10)
        engine.dispose()
    print(f"pipeline, PostgreSQL, {args.messages} messages per phase, {args.rounds} round(s); "
          f"ratio = ours / reference (higher is better); load average {os.getloadavg()[0]:.1f}")
    print("| run | messages/s | ratio | commits/msg | WAL bytes/msg | CPU-ms/msg accept / "
          "deliver / notify | wake-ups deliveries / webhooks |")
    print("|---|---|---|---|---|---|---|")
    for line in lines:
        print(line)


def check(engine, tag: str, count: int) -> None:
    """Every message of the phase Sent exactly once, no webhook row left behind."""
    from sqlalchemy import text

    with engine.connect() as conn:
        sent = conn.execute(text("SELECT count(*) FROM messages WHERE tag = :t AND "
                                 "status = 'Sent'"), {"t": tag}).scalar_one()
        attempts = conn.execute(text(
            "SELECT count(*) FROM deliveries d JOIN messages m ON m.id = d.message_id "
            "WHERE m.tag = :t"), {"t": tag}).scalar_one()
        left = conn.execute(text("SELECT count(*) FROM webhook_requests")).scalar_one()
    assert sent == count and attempts == count and left == 0, (sent, attempts, left)


if __name__ == "__main__":
    main()
