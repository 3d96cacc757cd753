"""Message content in the content store (issue 35 item 6): database growth and WAL per
10 KB message, and send and delivery throughput, against today's in-database bytes measured
in the same run from another source tree (a checkout of main).

One run of one tree (``--tree``; default this one): the local stack in-process on PostgreSQL
(BENCH_DATABASE_URL, its public schema dropped and re-created), workers in this process,
delivery to a loopback aiosmtpd MX that keeps nothing, the file content store in a temporary
directory (a tree without the store ignores it). 20 warm-up messages, then N messages (default
200) of 10 KB of incompressible text (base64 of random bytes) POSTed one at a time, each
DKIM-signed and delivered. Measured over the N:

- database growth per message: ``pg_total_relation_size`` (heap, TOAST, indexes, FSM/VM) of
  every table of the schema, after every message is Sent, less before;
- WAL per message: ``pg_current_wal_lsn`` delta (cluster-wide: other users of the server add);
- send rate: N over the time of the N POSTs; pipeline rate: N over the time from the first
  POST to the N-th message Sent (wall clock: on a shared machine the noisiest figures);
- CPU-ms per message: the process's CPU time (HTTP API, workers, the MX) over the same
  span, over N: what the store costs in work, less disturbed by other users of the machine
  than the rates (PostgreSQL's own CPU is not in it).

``--compare TREE`` runs TREE and this tree alternately (``--rounds`` each, best of) and prints
the ratios (this tree / TREE). Run:
    git archive main | tar -x -C /tmp/main-tree
    BENCH_DATABASE_URL=postgresql+pg8000://postgres@127.0.0.1:5432/bench \\
        .venv/bin/python bench/bench_content.py --compare /tmp/main-tree --rounds 2
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _sizes(engine) -> tuple[int, int]:
    from sqlalchemy import text

    with engine.connect() as conn:
        size = conn.execute(text(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'")).scalar()
        lsn = conn.execute(text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar()
    return int(size), int(lsn)


def one_run(n: int, size: int) -> dict:
    """This process's tree (sys.path[0]) measured once; returns the figures."""
    sys.path.insert(0, os.getcwd())
    from bench.common import ADMIN_KEY, STACK_ENV, bench_database_url, prepare_database

    url = bench_database_url()
    work = tempfile.mkdtemp(prefix="bench-content-")
    os.environ.update(STACK_ENV)
    prepare_database(url, CONTENT_STORE="file", CONTENT_STORE_DIR=os.path.join(work, "content"),
                     WORKER_PROCESSES="0", TIME_SCALE="1")
    from sqlalchemy import create_engine

    from chalicelib.db import migrate
    from tests.mx import ScriptedMX
    from tests.support import Api, free_port, make_tenant, wait_for

    migrate.prepare()
    mx = ScriptedMX().start()
    os.environ["DELIVERY_RELAY"] = mx.relay
    from app import app
    from chalicelib.local.stack import LocalStack

    stack = LocalStack(app, http_port=0, smtp_port=free_port(), sweep_interval=3600).start()
    engine = create_engine(url)
    try:
        api = Api(stack.base_url, ADMIN_KEY)
        tenant = make_tenant(api)
        path = "/api/v2/server/messages"

        def send(i: int) -> int:
            text = base64.encodebytes(os.urandom(size * 3 // 4)).decode()
            body = {"from": f"App <app@{tenant.domain}>", "to": [f"r{i}@recipient.example"],
                    "subject": f"Bench {i}", "text_body": text}
            return Api.data(api.post(path, body, server_key=tenant.api_key), 201)[
                "recipients"][0]["id"]

        def sent(ids: list[int]) -> bool:
            with engine.connect() as conn:
                from sqlalchemy import text
                return conn.execute(text(
                    "SELECT count(*) FROM messages WHERE status = 'Sent' AND id = ANY(:ids)"),
                    {"ids": ids}).scalar() == len(ids)

        warm = [send(i) for i in range(20)]
        wait_for(lambda: sent(warm), 120, message="warm-up sent")
        db_before, wal_before = _sizes(engine)
        cpu_before = time.process_time()
        started = time.perf_counter()
        ids = [send(i) for i in range(n)]
        posted = time.perf_counter()
        wait_for(lambda: sent(ids), 600, interval=0.02, message="all sent")
        done = time.perf_counter()
        cpu = time.process_time() - cpu_before
        time.sleep(0.5)  # the outcome's last writes (events, counters) committed
        db_after, wal_after = _sizes(engine)
        content_dir = os.path.join(work, "content")
        stored = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(content_dir)
                     for f in fs)
        return {"db_per_message": (db_after - db_before) / n,
                "wal_per_message": (wal_after - wal_before) / n,
                "store_per_message": stored / (n + 20),
                "send_rate": n / (posted - started), "pipeline_rate": n / (done - started),
                "cpu_ms_per_message": cpu * 1000 / n}
    finally:
        stack.stop()
        mx.stop()
        engine.dispose()


def run_tree(tree: str, n: int, size: int) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", "--messages",
                          str(n), "--size", str(size)], cwd=tree, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": tree})
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"run in {tree} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--size", type=int, default=10_000, help="bytes of text per message")
    ap.add_argument("--compare", help="the other tree (before), e.g. a checkout of main")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.messages, args.size)))
        return
    trees = [("before", args.compare)] if args.compare else []
    trees.append(("after", ROOT))
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, tree in trees:
            got = run_tree(tree, args.messages, args.size)
            results[name].append(got)
            print(name, {k: round(v, 1) for k, v in got.items()}, flush=True)
    best = {name: {"db_per_message": min(r["db_per_message"] for r in runs),
                   "wal_per_message": min(r["wal_per_message"] for r in runs),
                   "store_per_message": max(r["store_per_message"] for r in runs),
                   "send_rate": max(r["send_rate"] for r in runs),
                   "pipeline_rate": max(r["pipeline_rate"] for r in runs),
                   "cpu_ms_per_message": min(r["cpu_ms_per_message"] for r in runs)}
            for name, runs in results.items()}
    print(f"\n{args.messages} messages of {args.size} bytes of text; best of {args.rounds}")
    print("| figure | before | after | after / before |\n|---|---|---|---|")
    for key, unit in (("db_per_message", "B"), ("wal_per_message", "B"),
                      ("store_per_message", "B"), ("send_rate", "msg/s"),
                      ("pipeline_rate", "msg/s"), ("cpu_ms_per_message", "ms")):
        after = best["after"][key]
        before = best["before"][key] if "before" in best else None
        ratio = f"{after / before:.2f}" if before else "-"
        shown = f"{before:,.1f} {unit}" if before is not None else "-"
        print(f"| {key} | {shown} | {after:,.1f} {unit} | {ratio} |")


if __name__ == "__main__":
    main()
