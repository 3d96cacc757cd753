"""The whole pipeline as ``make run`` runs it, on PostgreSQL, measured from outside, against a
minimal reference loop in the same run on the same database, MX and webhook receiver.

Ours: ``python -m chalicelib.local`` (what ``make run`` starts) as a subprocess, configured by
environment only (DATABASE_URL, PORT, SMTP_PORT, ADMIN_API_KEY, DELIVERY_RELAY=<the loopback
MX>, WEBHOOKS_ALLOW_PRIVATE_TARGETS=true, and WORKER_PROCESSES from ``--worker-processes``;
HTTP_PROCESSES and SMTP_PROCESSES pass through from the caller's environment). N messages go
through ``POST /api/v2/server/messages/batch`` in entries of 500; each is DKIM-signed and
delivered to a loopback MX (aiosmtpd) and its ``MessageSent`` event POSTed, signed, to a
webhook receiver. The clock runs from the first POST until the receiver has the N-th signed
MessageSent webhook. The process tree measured is printed with each row (a stack that
ignores the process counts runs one process).

Reference: one process (this one), one loop over N already-accepted messages: claim one row
(SELECT ... FOR UPDATE SKIP LOCKED), DKIM-sign, send on one reused SMTP connection, record the
attempt and status, POST a signed webhook on a keep-alive session, commit. It skips
acceptance, so it is a strict bar. Its messages are accepted beforehand by the app's HTTP
server alone in this process (no workers, wake-ups dropped), while no stack runs.

The MX and the receiver run in processes of their own for both.

Printed per row, each beside the reference's and as a ratio:
- messages/s end to end (ratio ours / reference, higher is better);
- PostgreSQL commits per message: ``pg_stat_database.xact_commit`` delta of a database only
  this bench uses, from before the stack starts to after it stopped (every backend gone, so
  its statistics are flushed), less what starting and stopping the stack with no mail commits
  (measured once per process setting, printed), over N plus the 20 warm-up messages each
  stack delivers before its clock starts;
- CPU-ms per message: for ours, the whole process tree of the stack (``bench/make_run.py``:
  utime+stime of every live process plus what reaped children used) from the first POST to
  the N-th webhook; for the reference, its own process (``process_time``) over its loop;
- WAL bytes per message (``pg_current_wal_lsn`` delta: cluster-wide, so other users of the
  server add to it).

The Lambda-shaped arrangement (worker processes fed SQS-like batches, the API in the bench's
process) is ``bench/bench_pipeline_lambda.py``; bench_rls.py uses it.

Run: .venv/bin/python bench/bench_pipeline.py [--messages 2000] [--worker-processes default,0,2]
     [--rounds 1] [--profile PREFIX]   ("default": WORKER_PROCESSES unset, as ``make run``)
     BENCH_DATABASE_URL picks the database (its public schema is dropped and re-created; the
     default is a dedicated ``test_i16_pipeline`` database, created when missing)."""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import smtplib
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import ADMIN_KEY, STACK_ENV, prepare_database  # noqa: E402

DEFAULT_URL = "postgresql+pg8000://postgres@127.0.0.1:5432/test_i16_pipeline"
BATCH = 500
WARM_UP = 20  # messages through each stack before its clock starts


# --------------------------------------------------------------------------- sinks (own process)

def sink_main(kind: str, ready, counts, stop) -> None:
    """The MX (kind "mx", ``counts[0]``: messages received) or the webhook receiver ("rx",
    ``counts[1]``: signed MessageSent POSTs), each in a process of its own, so neither shares
    a GIL with the pipeline or with the other."""
    sys.path.insert(0, ROOT)
    from tests.mx import ScriptedMX
    from tests.receivers import Receiver

    if kind == "mx":
        sink = ScriptedMX().start()
        ready.send(sink.relay)
        received, index = sink.messages, 0
        counted = len
    else:
        sink = Receiver([200]).start()
        ready.send(sink.url)
        received, index = sink.requests, 1

        def counted(requests) -> int:
            return sum(1 for r in requests
                       if "x-service-signature" in r.headers and b'"MessageSent"' in r.body)
    total = seen = 0
    while not stop.is_set():
        now = len(received)
        total += counted(received[seen:now])
        seen = now
        counts[index] = total
        if seen > 10000:  # keep memory flat over long runs
            del received[:seen]
            seen = 0
        time.sleep(0.005)
    sink.stop()


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
    from chalicelib.services import content
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
                    "SELECT m.id, m.token, m.rcpt_to, s.content_key, s.raw FROM messages m "
                    "JOIN submissions s "
                    "ON s.id = m.submission_id WHERE m.status = 'Pending' AND m.tag = 'ref' "
                    "AND m.next_attempt_at <= :now ORDER BY m.id LIMIT 1 "
                    "FOR UPDATE OF m SKIP LOCKED"), {"now": clock.now()}).first()
                if found is None:
                    break
                # The source from the content store, as the service reads it.
                source = content.read(found.content_key, found.raw)
                signed = signer.sign_message(source, domain=domain[0],
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


def tenant_domain(tenant) -> tuple:
    """(domain, DKIM selector, private key PEM) of the tenant's domain, for the reference."""
    from sqlalchemy import select

    from chalicelib.db.models import Domain
    from chalicelib.services.dkim import keys as dkim_keys
    from tests.support import all_tenants

    with all_tenants() as db:
        d = db.scalars(select(Domain).where(Domain.name == tenant.domain)).one()
        return d.name, d.dkim_selector, dkim_keys.private_key(d.dkim_private_key_encrypted)


def measure_reference(api, tenant, engine, relay: str, hook_url: str, domain, n: int) -> dict:
    """Accept ``n`` messages tagged 'ref' (nothing may deliver them meanwhile), then run the
    reference loop over them: messages/s, commits/msg, CPU-ms/msg of this process, WAL
    bytes/msg."""
    post_batches(api, tenant, n, "ref")
    c0, w0 = settle_stats(engine)
    cpu0 = time.process_time()
    seconds = reference(engine, relay, hook_url, domain, n)
    cpu = time.process_time() - cpu0
    c1, w1 = settle_stats(engine)
    return {"rate": n / seconds, "commits": (c1 - c0) / n, "cpu": 1000 * cpu / n,
            "wal": (w1 - w0) / n}


def stop_sinks(stop, sinks) -> None:
    stop.set()
    for sink in sinks:
        sink.join(timeout=10)


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


def make_bench_tenant(api, hook_url: str):
    """A tenant whose webhook receives every MessageSent."""
    from tests.support import make_tenant

    tenant = make_tenant(api)
    api.post(tenant.server_path + "/webhooks",
             {"name": "bench", "url": hook_url, "events": ["MessageSent"]}).raise_for_status()
    return tenant


def start_acceptor():
    """The app's HTTP server alone in this process, its wake-ups dropped: it accepts the
    reference's messages, and nothing here delivers them. Returns (server, admin Api)."""
    from app import app
    from bench.common import NullPort
    from chalicelib import queues
    from chalicelib.config import get_settings
    from chalicelib.local.http_server import HttpServer
    from chalicelib.local.stack import prepare
    from tests.support import Api

    prepare(get_settings())  # schema, installation key, the seeded admin key
    queues.set_port(NullPort())
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    return server, Api(f"http://127.0.0.1:{server.port}", ADMIN_KEY)


def ensure_database(url: str) -> None:
    from sqlalchemy import create_engine, text

    base, _, name = url.rpartition("/")
    admin = create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                            {"n": name}).first():
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()


def run_stack(tenant, counts, workers: str, n: int, tag: str, before: tuple[int, int],
              engine, profile: str = "") -> dict:
    """One timed phase under ``make run``'s process: start it (WORKER_PROCESSES=``workers``,
    unset for "default"), post ``n`` messages tagged ``tag``, wait for the MX to have them and
    the receiver their signed webhooks (``before``: what the sinks had counted already), stop
    it. ``profile``: py-spy records the tree over the timed part into that file (collapsed
    stacks). Returns the figures."""
    from bench.make_run import MakeRun, describe, tree_cpu
    from tests.support import Api

    c0, w0 = settle_stats(engine)
    stack = MakeRun({"WORKER_PROCESSES": None if workers == "default" else workers}).start()
    try:
        api = Api(stack.base_url, ADMIN_KEY)
        # Warm-up, not timed: first-use imports and caches of every process (a running
        # stack has paid them long ago).
        post_batches(api, tenant, WARM_UP, tag + "-warm-up")
        wait_count(counts, 1, before[1] + WARM_UP, 600)
        before = (before[0] + WARM_UP, before[1] + WARM_UP)
        spy = start_profile(stack.pid, profile) if profile else None
        cpu0 = tree_cpu(stack.pid)
        started = time.perf_counter()
        post_batches(api, tenant, n, tag)
        wait_count(counts, 0, before[0] + n, 600)
        end = wait_count(counts, 1, before[1] + n, 600)
        cpu = tree_cpu(stack.pid) - cpu0
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        processes = describe(stack.pid)
        time.sleep(0.5)  # the last outcome's commit follows its POST
    finally:
        stack.stop()
    c1, w1 = settle_stats(engine)
    check(engine, tag, n)
    return {"seconds": end - started, "cpu": cpu, "commits": c1 - c0, "wal": w1 - w0,
            "tree": processes, "counted": before}


def start_profile(pid: int, path: str):
    """py-spy sampling ``pid`` and its children (100 Hz) into ``path`` as collapsed stacks,
    one file per process setting. Only samples of a thread holding its process's GIL count
    (--gil): that is the Python CPU; a thread waiting on a socket is not."""
    import subprocess

    spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record",
                            "--subprocesses", "--gil", "--rate", "100", "--format", "raw",
                            "--output", path, "--pid", str(pid)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached before the clock starts
    return spy


def idle_commits(workers: str, engine) -> int:
    """What starting and stopping the stack commits with no mail."""
    from bench.make_run import MakeRun

    c0, _ = settle_stats(engine)
    MakeRun({"WORKER_PROCESSES": None if workers == "default" else workers}).start().stop()
    c1, _ = settle_stats(engine)
    return c1 - c0


def main() -> None:
    parser = argparse.ArgumentParser(description="The pipeline under make run against a "
                                     "minimal loop, on PostgreSQL (see the module's docstring).")
    parser.add_argument("--messages", type=int, default=2000, help="messages per phase")
    parser.add_argument("--worker-processes", default="default",
                        help='comma-separated WORKER_PROCESSES values; "default" leaves it unset')
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", default="",
                        help="py-spy records each stack's timed part into PREFIX-<setting>.txt "
                        "(collapsed stacks; its sampling skews the figures of that run)")
    args = parser.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    assert url.startswith("postgresql"), "the pipeline bench measures PostgreSQL"
    settings_list = args.worker_processes.split(",")
    _, sinks, counts, stop, relay, hook_url = prepare_world(url)
    import logging

    from sqlalchemy import create_engine

    from chalicelib.db import migrate

    migrate.upgrade(url)
    logging.disable(logging.WARNING)
    acceptor, api = start_acceptor()
    engine = create_engine(url)
    lines, trees, idle = [], {}, {}
    try:
        tenant = make_bench_tenant(api, hook_url)
        domain = tenant_domain(tenant)
        n = args.messages
        for workers in settings_list:
            idle[workers] = idle_commits(workers, engine)
        sent = hooks = 0
        for round_no in range(args.rounds):
            # The reference first: no stack runs, so nothing else takes its messages.
            ref = measure_reference(api, tenant, engine, relay, hook_url, domain, n)
            sent, hooks = sent + n, hooks + n
            lines.append(f"| reference loop (round {round_no + 1}) | {ref['rate']:.0f}/s | 1.00 | "
                         f"{ref['commits']:.2f} | 1.00 | {ref['cpu']:.2f} | 1.00 | "
                         f"{ref['wal']:.0f} |")
            for workers in settings_list:
                tag = f"r{round_no}w{workers}"
                got = run_stack(tenant, counts, workers, n, tag, (sent, hooks), engine,
                                f"{args.profile}-{workers}.txt" if args.profile else "")
                sent, hooks = got["counted"][0] + n, got["counted"][1] + n
                trees[workers] = got["tree"]
                rate = n / got["seconds"]
                # The warm-up's messages committed too: counted in (a slight overestimate:
                # its batch is small).
                commits = (got["commits"] - idle[workers]) / (n + WARM_UP)
                cpu = 1000 * got["cpu"] / n
                lines.append(
                    f"| make run, WORKER_PROCESSES={workers} | {rate:.0f}/s | "
                    f"{rate / ref['rate']:.2f} | {commits:.2f} | "
                    f"{commits / ref['commits']:.2f} | {cpu:.2f} | {cpu / ref['cpu']:.2f} | "
                    f"{got['wal'] / n:.0f} |")
    finally:
        acceptor.stop()
        stop_sinks(stop, sinks)
        engine.dispose()
    print(f"pipeline under make run, PostgreSQL, {args.messages} messages per phase, "
          f"{args.rounds} round(s); ratios against the reference loop of the same round "
          f"(messages/s: higher is better; commits and CPU: lower is better); "
          f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    for workers in settings_list:
        print(f"- WORKER_PROCESSES={workers}: measured {trees.get(workers, '?')}; starting "
              f"and stopping it with no mail commits {idle[workers]} (subtracted)")
    print("| run | messages/s | ratio | commits/msg | ratio | CPU-ms/msg (stack's process tree;"
          " reference: its process) | ratio | WAL bytes/msg |")
    print("|---|---|---|---|---|---|---|---|")
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
