"""CPU per message of the delivery worker's own work, in one process: ``process_batch`` over
already accepted messages, as a worker process of ``make run`` runs it, against a loopback MX.

One *arm* is a fresh run of this file as a subprocess (``--arm``), with PYTHONPATH naming the
code under test (this tree, or a copy of another commit's, ``--base DIR``): it empties a
database (SQLite file by default, or ``--database-url``), accepts ``--messages`` through the
app's HTTP server alone (wake-ups dropped; a tenant with a MessageSent webhook, so outcomes
write their webhook rows), then hands their ids to ``process.process_batch`` in batches of 10
in this process and takes ``time.process_time()`` (every thread of the process: the
concurrent destinations' too) around that loop only. The MX (aiosmtpd, accepting everything)
runs in a process of its own. Recipients cycle over ``--domains`` domains, all relayed to
the MX (DELIVERY_RELAY), so a batch has that many destinations. ``--noise`` (SQLite): another
process commits to the database every ~1 ms while the deliveries run, as ``make run``'s other
processes do (each of its commits makes this process's connections re-read their pages).

Without ``--arm`` it alternates arms (``--base`` first, then this tree) for ``--rounds`` and
prints each arm's CPU-ms per message, the medians and their ratio. ``--profile FILE``: one
arm of this tree under cProfile instead (pstats written to FILE; it sees the calling thread
only, and inflates Python calls several times); ``--spy FILE``: one arm under py-spy,
sampling the threads holding the GIL (Python's own CPU, every thread; collapsed stacks).

Run: .venv/bin/python bench/bench_delivery_cpu.py --base /tmp/main-copy [--messages 400]
     [--rounds 3] [--domains 1] [--port 41025] [--database-url URL]
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 10


def sink(port: int) -> None:
    """A loopback MX that accepts everything (its own process: its CPU is not counted)."""
    from aiosmtpd.controller import Controller

    class Accept:
        async def handle_DATA(self, server, session, envelope):  # noqa: ANN001
            return "250 OK"

    controller = Controller(Accept(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        while True:
            time.sleep(3600)
    finally:
        controller.stop()


NOISE = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("PRAGMA busy_timeout=30000")
db.execute("CREATE TABLE IF NOT EXISTS bench_noise (id INTEGER PRIMARY KEY, n INTEGER)")
db.execute("INSERT OR IGNORE INTO bench_noise VALUES (1, 0)")
while True:
    db.execute("UPDATE bench_noise SET n = n + 1 WHERE id = 1")
    time.sleep(0.001)
"""


def arm(args) -> dict:
    """Accept the messages, then deliver them in batches; CPU-ms per message delivered."""
    # the code under test's tree (the arm's working directory), bench/common.py included
    from bench.common import ADMIN_KEY, STACK_ENV, NullPort, prepare_database

    work = tempfile.mkdtemp(prefix="bench-delivery-")
    url = args.database_url or f"sqlite:///{work}/db.sqlite3"
    prepare_database(url, **STACK_ENV, DELIVERY_RELAY=f"127.0.0.1:{args.port}",
                     CONTENT_STORE_DIR=os.path.join(work, "content"),
                     WEBHOOKS_ALLOW_PRIVATE_TARGETS="true")
    import logging

    logging.disable(logging.WARNING)
    from app import app
    from chalicelib import queues
    from chalicelib.config import get_settings
    from chalicelib.local.http_server import HttpServer
    from chalicelib.local.stack import prepare
    from chalicelib.services.delivery import process
    from sqlalchemy import select
    from tests.support import Api, all_tenants, make_tenant

    prepare(get_settings())
    queues.set_port(NullPort())
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        api = Api(f"http://127.0.0.1:{server.port}", ADMIN_KEY)
        tenant = make_tenant(api)
        api.post(tenant.server_path + "/webhooks", {
            "name": "bench", "url": "http://127.0.0.1:9/hook",
            "events": ["MessageSent"]}).raise_for_status()
        total = args.messages + BATCH  # the first batch warms up, not counted
        for start in range(0, total, 500):
            messages = [{"from": f"App <app@{tenant.domain}>",
                         "to": [f"user{i}@d{i % args.domains}.example.net"],
                         "subject": f"Bench {i}", "text_body": "Hello from the bench.\n" * 10}
                        for i in range(start, min(total, start + 500))]
            response = api.post("/api/v2/server/messages/batch", {"messages": messages},
                                headers={"X-Server-API-Key": tenant.api_key})
            assert response.status_code == 200, response.text[:300]
    finally:
        server.stop()
    from chalicelib.db.models import Message

    with all_tenants() as db:
        ids = list(db.scalars(select(Message.id).where(Message.scope == "outgoing")
                              .order_by(Message.id)))
    batches = [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)]
    noise = None
    if args.noise and url.startswith("sqlite"):
        # Another process committing to the database every ms or so, as make run's API,
        # webhook worker and other worker processes do: each commit there makes this
        # process's connections drop their page cache at their next transaction.
        noise = subprocess.Popen([sys.executable, "-c", NOISE, url.split("///", 1)[1]])
    results: dict = {}
    results.update(process.process_batch(batches[0]))
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)  # CPU, not waits
        profiler.enable()
    cpu, wall = time.process_time(), time.perf_counter()
    for batch in batches[1:]:
        results.update(process.process_batch(batch))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if noise is not None:
        noise.terminate()
        noise.wait()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    counted = len(ids) - len(batches[0])
    outcomes: dict = {}
    for value in results.values():
        outcomes[value] = outcomes.get(value, 0) + 1
    return {"cpu_ms": 1000 * cpu / counted, "wall_ms": 1000 * wall / counted,
            "messages": counted, "outcomes": outcomes}


def run_arm(code: str, args, profile: str | None = None) -> dict:
    # the parent's helpers (each arm imports its own tree's bench package)
    from bench.common import last_json, py_spy_prefix

    env = {**os.environ, "PYTHONPATH": code}
    spy = py_spy_prefix(args.spy) if args.spy else []
    command = spy + [sys.executable, os.path.join(ROOT, "bench", "bench_delivery_cpu.py"), "--arm",
               "--messages", str(args.messages), "--domains", str(args.domains),
               "--port", str(args.port)]
    if args.database_url:
        command += ["--database-url", args.database_url]
    if profile:
        command += ["--profile", profile]
    if args.noise:
        command.append("--noise")
    out = subprocess.run(command, env=env, cwd=code, check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return last_json(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arm", action="store_true")
    parser.add_argument("--base")
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--domains", type=int, default=1)
    parser.add_argument("--port", type=int, default=41025)
    parser.add_argument("--database-url")
    parser.add_argument("--profile")
    parser.add_argument("--spy", metavar="FILE",
                        help="one arm of this tree under py-spy, samples holding the GIL "
                             "(collapsed stacks in FILE, for bench/profile_summary.py)")
    parser.add_argument("--noise", action="store_true",
                        help="SQLite: another process commits every ~1 ms meanwhile")
    args = parser.parse_args()
    if args.arm:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(arm(args)))
        return
    sys.path.insert(0, ROOT)  # this tree's bench package, for the parent's helpers
    import multiprocessing

    mx = multiprocessing.Process(target=sink, args=(args.port,), daemon=True)
    mx.start()
    time.sleep(1.0)
    try:
        if args.profile or args.spy:
            print(run_arm(ROOT, args, args.profile))
            return
        arms = {"base": args.base, "this": ROOT} if args.base else {"this": ROOT}
        figures: dict[str, list[float]] = {name: [] for name in arms}
        for round_ in range(args.rounds):
            for name, code in arms.items():
                result = run_arm(code, args)
                figures[name].append(result["cpu_ms"])
                print(f"round {round_ + 1} {name}: {result['cpu_ms']:.3f} CPU-ms/message "
                      f"({result['wall_ms']:.2f} ms wall; {result['outcomes']})", flush=True)
        medians = {name: statistics.median(values) for name, values in figures.items()}
        for name, value in medians.items():
            print(f"median {name}: {value:.3f} CPU-ms/message")
        if "base" in medians:
            print(f"ratio this/base: {medians['this'] / medians['base']:.3f}")
    finally:
        mx.terminate()


if __name__ == "__main__":
    main()
