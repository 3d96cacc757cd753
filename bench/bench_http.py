"""The HTTP API under ``make run`` with HTTP_PROCESSES=1 and 2, against a minimal server in
the same run, on PostgreSQL: single sends (``POST /api/v2/server/messages``, one recipient)
per second from parallel keep-alive clients.

Ours: ``python -m chalicelib.local`` (bench/make_run.py), HTTP_PROCESSES set per arm (a stack
that ignores it serves from one process: the process tree measured is printed). Each send is
scheduled a day ahead (``send_at``) so no delivery competes with the API during the round:
what is measured is accepting.

Baseline: a minimal server in one process of its own (``http.server``, a thread per
connection, HTTP/1.1 keep-alive): it parses the JSON body and inserts it as one row with one
commit (SQLAlchemy Core on the same database): the least a durable accept does.

Clients: ``--clients`` processes (http.client, one keep-alive connection each) POST one after
another for ``--seconds``; the rate is their sum. Arms alternate within each round; the best
round counts, the median is printed beside it.

Run: .venv/bin/python bench/bench_http.py [--clients 4] [--seconds 3] [--rounds 3]
     [--http-processes 1,2]  BENCH_DATABASE_URL picks the database (its public schema is
     dropped and re-created; default a dedicated ``test_i26_http``, created when missing)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import ADMIN_KEY, STACK_ENV, http_post_rate, prepare_database  # noqa: E402

DEFAULT_URL = "postgresql+pg8000://postgres@127.0.0.1:5432/test_i26_http"


def baseline_server(url: str, port: int) -> None:
    """The minimal server (run as ``bench_http.py --baseline-server PORT``)."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sqlalchemy import create_engine, text

    engine = create_engine(url, pool_size=20)
    insert = text("INSERT INTO bench_http_baseline (body) VALUES (:body) RETURNING id")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with engine.begin() as conn:
                row_id = conn.execute(insert, {"body": json.dumps(body)}).scalar_one()
            answer = json.dumps({"status": "success", "data": {"id": row_id}}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    print("ready", flush=True)
    Server(("127.0.0.1", port), Handler).serve_forever()


def start_baseline(url: str):
    import subprocess

    from sqlalchemy import create_engine, text

    from tests.support import free_port

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS bench_http_baseline "
                          "(id bigserial PRIMARY KEY, body text NOT NULL)"))
    engine.dispose()
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--baseline-server", str(port)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--http-processes", default="1,2")
    parser.add_argument("--baseline-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    if args.baseline_server:
        baseline_server(url, args.baseline_server)
        return
    assert url.startswith("postgresql"), "this bench measures PostgreSQL"
    from bench.bench_pipeline import ensure_database

    ensure_database(url)
    prepare_database(url, **STACK_ENV, DELIVERY_RELAY="capture")
    import datetime

    from bench.make_run import MakeRun, describe
    from tests.support import Api, make_tenant

    settings = args.http_processes.split(",")
    stack = MakeRun({"HTTP_PROCESSES": settings[0]}).start()
    try:
        tenant = make_tenant(Api(stack.base_url, ADMIN_KEY))
    finally:
        stack.stop()
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1))
    send = {"from": f"Bench <app@{tenant.domain}>", "to": ["user@example.net"],
            "subject": "Your receipt", "text_body": "Thanks for your order.\n" * 20,
            "send_at": later.isoformat()}
    headers = {"X-Server-API-Key": tenant.api_key}
    rates: dict[str, list[float]] = {}
    trees: dict[str, str] = {}
    for round_no in range(args.rounds):
        arms = ["baseline"] + settings
        for arm in arms if round_no % 2 == 0 else reversed(arms):
            if arm == "baseline":
                proc, base_url = start_baseline(url)
                try:
                    rate = http_post_rate(base_url, "/", send, {}, 201, seconds=args.seconds,
                                          rounds=1, clients=args.clients)
                finally:
                    proc.terminate()
                    proc.wait()
            else:
                stack = MakeRun({"HTTP_PROCESSES": arm}).start()
                try:
                    http_post_rate(stack.base_url, "/api/v2/server/messages", send, headers,
                                   201, seconds=1, rounds=1, clients=args.clients)  # warm-up
                    rate = http_post_rate(stack.base_url, "/api/v2/server/messages", send,
                                          headers, 201, seconds=args.seconds, rounds=1,
                                          clients=args.clients)
                    trees[arm] = describe(stack.pid)
                finally:
                    stack.stop()
            rates.setdefault(arm, []).append(rate)
    base = rates["baseline"]
    print(f"HTTP API under make run, PostgreSQL: single sends (1 recipient, scheduled) from "
          f"{args.clients} keep-alive clients, {args.rounds} alternating rounds of "
          f"{args.seconds:.0f} s; ratio = ours / baseline (higher is better); load average "
          f"{os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    for arm in settings:
        print(f"- HTTP_PROCESSES={arm}: measured {trees.get(arm, '?')}")
    print("| arm | requests/s best / median | ratio best | ratio of medians |")
    print("|---|---|---|---|")
    print(f"| minimal server (1 process, 1 INSERT + commit) | {max(base):.0f} / "
          f"{statistics.median(base):.0f} | 1.00 | 1.00 |")
    for arm in settings:
        got = rates[arm]
        print(f"| make run, HTTP_PROCESSES={arm} | {max(got):.0f} / {statistics.median(got):.0f}"
              f" | {max(got) / max(base):.2f} | "
              f"{statistics.median(got) / statistics.median(base):.2f} |")


if __name__ == "__main__":
    main()
