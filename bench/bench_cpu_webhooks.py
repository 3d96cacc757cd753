"""CPU time per webhook of the webhook worker (issue 33), A/B against another copy of the code
(main's) in the same run.

Each round runs one child process per side, alternately (``--rounds`` of each). A child
imports ``chalicelib`` from its side's root, empties its own database, makes one webhook
(with an encrypted custom header and a signature, as every ``MessageSent`` webhook of the
profile), inserts ``--rows`` queue rows and hands them to ``batch.process_batch`` in batches
of 10 from ``--threads`` worker threads, as a worker process does. The receiver runs in a
process of its own (answering after ``--delay-ms``), so its CPU is not counted: the figure is
``time.process_time()`` of the child over the timed rows (inserted beforehand; after a
warm-up of 50 rows), per webhook. Medians of the rounds and their ratio are printed.

Run: .venv/bin/python bench/bench_cpu_webhooks.py --base /tmp/w-base [--rounds 3]
     [--rows 600] [--delay-ms 20] [--threads 4] [--database sqlite|postgresql]
     [--pg-url URL (its public schema is dropped and re-created)]
     ``--profile FILE`` (one child of this tree under py-spy, every thread: collapsed stacks
     in FILE, for bench/profile_summary.py)
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
RECEIVER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.receivers import Receiver, Reply
rx = Receiver([Reply(200, body=b'{{"ok":true}}', delay={delay!r})]).start()
print(rx.url, flush=True)
sys.stdin.read()
"""


def child(args) -> None:
    sys.path.insert(0, args.root)
    os.environ.update({"WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true", "QUEUE_BACKEND": "local",
                       "LOG_LEVEL": "WARNING", "WORKER_THREADS": str(args.threads)})
    import threading

    from bench.bench_webhooks import insert_rows, make_webhook, setup_database
    from chalicelib import queues
    from chalicelib.services.webhooks import batch

    class NullPort:
        def send(self, queue, body, delay_seconds=0):
            pass

    setup_database(args.database_url)
    queues.set_port(NullPort())
    server_id, webhook_id, body = make_webhook(args.url)

    def run(ids: list[int]) -> None:
        n = len(ids)
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

        workers = [threading.Thread(target=worker) for _ in range(args.threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        assert outcomes.count("delivered") == n, sorted(set(outcomes))

    run(insert_rows(server_id, webhook_id, body, 50))  # warm-up: imports, statements, pools
    ids = insert_rows(server_id, webhook_id, body, args.rows)
    cpu, wall = time.process_time(), time.perf_counter()
    run(ids)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(json.dumps({"cpu_ms": 1000 * cpu / args.rows, "per_s": args.rows / wall}))


def run_child(root: str, url: str, args, database_url: str, profile: str | None = None) -> dict:
    sys.path.insert(0, HERE)  # the parent's helpers (a child imports its own tree's)
    from bench.common import last_json, py_spy_prefix

    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--root", root, "--url", url,
           "--rows", str(args.rows), "--threads", str(args.threads),
           "--database-url", database_url]
    if profile:
        cmd = py_spy_prefix(profile) + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": root}).stdout
    return last_json(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="the other side's code root (e.g. main's copy)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=600)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--pg-url", default=os.environ.get("BENCH_DATABASE_URL", ""))
    ap.add_argument("--profile")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--root", default=HERE)
    ap.add_argument("--url")
    ap.add_argument("--database-url")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    rx = subprocess.Popen([sys.executable, "-c", RECEIVER.format(root=HERE,
                                                                 delay=args.delay_ms / 1000)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        url = rx.stdout.readline().strip()
        tmp = tempfile.mkdtemp(prefix="bench-cpu-webhooks-")

        def db(side: str) -> str:
            if args.database == "postgresql":
                return args.pg_url
            return f"sqlite:///{tmp}/{side}.db"

        if args.profile:
            print(run_child(HERE, url, args, db("profile"), args.profile))
            return
        sides = {"this": HERE, "base": args.base}
        results: dict[str, list[dict]] = {s: [] for s in sides}
        for n in range(args.rounds):
            for side, root in sides.items():
                results[side].append(run_child(root, url, args, db(f"{side}{n}")))
                print(side, results[side][-1], flush=True)
        med = {s: statistics.median(r["cpu_ms"] for r in results[s]) for s in sides}
        print(f"CPU per webhook ({args.database}, {args.rows} rows, {args.threads} threads, "
              f"receiver {args.delay_ms:g} ms), median of {args.rounds}: "
              f"this {med['this']:.3f} ms, base {med['base']:.3f} ms, "
              f"ratio {med['this'] / med['base']:.3f}")
    finally:
        rx.stdin.close()
        rx.wait()


if __name__ == "__main__":
    main()
