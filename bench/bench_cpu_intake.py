"""CPU time per message of the API's intake of a send (issue 33): POST
/api/v2/server/messages/batch, A/B against another copy of the code (main's) in the same run.

Each round runs one child process per side, alternately (``--rounds`` of each). A child
imports the app from its side's root, empties its own SQLite database (or ``--pg-url``),
starts the local stack on ``--port`` and ``--port``+1 only to make a tenant, replaces the
queue with a no-op port (no worker competes), then calls the app in-process as Lambda does
(an API Gateway proxy event built once by Chalice's converter; the chalice, framework and
observability layers all run) with ``--requests`` batches of ``--entries`` entries, each
entry as ``bench_latency.py`` sends them (one recipient, a display-name sender at the
tenant's domain, a subject, a text body, a tag; recipients spread over 8 domains). The
figure is ``time.process_time()`` of the child over the timed requests (after 2 warm-up
requests), per message. Medians of the rounds and their ratio are printed.

Run: .venv/bin/python bench/bench_cpu_intake.py --base /tmp/w-base [--rounds 3]
     [--requests 20] [--entries 100] [--port 43100]
     ``--profile FILE`` (one child of this tree under py-spy: collapsed stacks in FILE);
     BENCH_CPROFILE=FILE: each child dumps a cProfile of its timed requests to FILE
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = "Thanks for your order.\n" * 20


def child(args) -> None:
    sys.path.insert(0, args.root)
    from bench.common import ADMIN_KEY, STACK_ENV, NullPort, prepare_database

    prepare_database(args.database_url, **STACK_ENV)
    import logging

    logging.disable(logging.WARNING)
    from chalice.local import LambdaEventConverter, RouteMatcher

    from app import app
    from chalicelib import queues
    from chalicelib.db import migrate
    from chalicelib.local.stack import LocalStack
    from tests.support import Api, make_tenant

    migrate.upgrade(args.database_url)
    stack = LocalStack(app, http_port=args.port, smtp_port=args.port + 1,
                       sweep_interval=3600).start()
    try:
        queues.set_port(NullPort())
        tenant = make_tenant(Api(stack.base_url, ADMIN_KEY))
    finally:
        stack.stop()
    queues.set_port(NullPort())
    converter = LambdaEventConverter(RouteMatcher(list(app.routes)))

    class Context:
        aws_request_id = "bench"
        function_name = "api_handler"
        memory_limit_in_mb = 512

        @staticmethod
        def get_remaining_time_in_millis():
            return 60000

    def event(n: int) -> dict:
        body = json.dumps({"messages": [
            {"from": f"App <app@{tenant.domain}>",
             "to": [f"user{n}-{i}@dest{i % 8}.example.net"],
             "subject": f"Intake {n} {i}", "text_body": BODY, "tag": "bench"}
            for i in range(args.entries)]}).encode()
        return converter.create_lambda_event(
            method="POST", path="/api/v2/server/messages/batch", body=body,
            headers={"x-server-api-key": tenant.api_key, "content-type": "application/json",
                     "content-length": str(len(body)), "host": "localhost"})

    def call(ev: dict) -> None:
        answer = app(ev, Context())
        assert answer["statusCode"] == 200, answer
        data = json.loads(answer["body"])["data"]
        assert data["failed"] == 0 and data["accepted"] == args.entries, answer["body"][:300]

    for n in range(2):
        call(event(n))
    events = [event(n) for n in range(2, 2 + args.requests)]  # built outside the timing
    profiler = None
    if os.environ.get("BENCH_CPROFILE"):  # (a pstats dump of the timed requests, main thread)
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu, wall = time.process_time(), time.perf_counter()
    for ev in events:
        call(ev)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.environ["BENCH_CPROFILE"])
    n = args.requests * args.entries
    print(json.dumps({"cpu_ms": 1000 * cpu / n, "per_s": n / wall}))


def run_child(root: str, args, database_url: str, profile: str | None = None) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--root", root,
           "--requests", str(args.requests), "--entries", str(args.entries),
           "--port", str(args.port), "--database-url", database_url]
    if profile:
        cmd = [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-r", "500",
               "--gil", "-f", "raw", "-o", profile, "--"] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": root}).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="the other side's code root (e.g. main's copy)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--entries", type=int, default=100)
    ap.add_argument("--port", type=int, default=43100)
    ap.add_argument("--pg-url", default="")
    ap.add_argument("--profile")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--root", default=HERE)
    ap.add_argument("--database-url")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    tmp = tempfile.mkdtemp(prefix="bench-cpu-intake-")

    def db(side: str) -> str:
        return args.pg_url or f"sqlite:///{tmp}/{side}.db"

    if args.profile:
        print(run_child(HERE, args, db("profile"), args.profile))
        return
    sides = {"this": HERE, "base": args.base}
    results: dict[str, list[dict]] = {s: [] for s in sides}
    for n in range(args.rounds):
        for side, root in sides.items():
            results[side].append(run_child(root, args, db(f"{side}{n}")))
            print(side, results[side][-1], flush=True)
    med = {s: statistics.median(r["cpu_ms"] for r in results[s]) for s in sides}
    print(f"CPU per message through the batch endpoint ({args.requests} x {args.entries} "
          f"entries, {'postgresql' if args.pg_url else 'sqlite'}), median of {args.rounds}: "
          f"this {med['this']:.3f} ms, base {med['base']:.3f} ms, "
          f"ratio {med['this'] / med['base']:.3f}")


if __name__ == "__main__":
    main()
