"""CPU per message of delivery's SMTP conversations (issue 33), A/B between two source trees
in the same run: the deliveries of N accepted messages to D destinations over a delay proxy,
alternately with each tree's code, the delivering process's ``time.process_time()`` per
message.

The rig (in processes of their own, so their CPU is not counted): ``latency_rig``'s counting
aiosmtpd sink (PIPELINING), its delay proxy (``--delay-ms`` one way) listening on destination
k's loopback address 127.0.0.(10+k), and a loopback DNS answering the destinations' MX and A
records (``tests/dns_server.py``'s zone format). Every port is taken from ``--ports``
(a base; the rig and each round use the next few).

Each round of an arm is a fresh process running the tree's code (``sys.path[0]`` = the
tree): a fresh SQLite database, the local stack in-process (WORKER_PROCESSES=0, its queue
dropped while accepting), N messages accepted through the batch API (not measured). Then
the wake-ups of every message go to the stack's local queue (4 worker threads taking
DELIVERY_BATCH_SIZE at a time, as a `make run` worker process; BENCH_WORKER_THREADS
changes that) and the clock runs until the
sink has the N-th message: CPU seconds of the whole process (user+system) / N.

Run: .venv/bin/python bench/bench_conversations.py --base /tmp/s-base [--rounds 3]
     [--messages 1000] [--destinations 50] [--delay-ms 25] [--ports 42000]
     [--count module:function,...] [--profile FILE]   (py-spy collapsed stacks of the ours arm's last round)"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(args) -> None:
    """One round with the code of ``args.root``: prints JSON with CPU per message."""
    sys.path.insert(0, args.root)
    os.chdir(args.root)
    folder = tempfile.mkdtemp(prefix="bench-conv-")
    from bench.common import STACK_ENV, prepare_database

    env = {**STACK_ENV, "DELIVERY_RELAY": "mx", "DNS_RESOLVERS": f"127.0.0.1:{args.dns_port}",
           "DELIVERY_MX_PORT": str(args.mx_port), "WORKER_PROCESSES": "0",
           "CONTENT_STORE_DIR": os.path.join(folder, "content")}
    prepare_database(f"sqlite:///{os.path.join(folder, 'bench.db')}", **env)
    from sqlalchemy import text

    from app import app
    from bench.common import ADMIN_KEY, NullPort
    from chalicelib import queues
    from chalicelib.db import session_scope
    from chalicelib.local.stack import LocalStack
    from tests.support import Api, make_tenant

    stack = LocalStack(app, http_port=args.http_port, smtp_port=args.smtp_port,
                       workers=int(os.environ.get("BENCH_WORKER_THREADS", "4")),
                       sweep_interval=3600).start()
    queues.set_port(NullPort())
    api = Api(stack.base_url, ADMIN_KEY)
    tenant = make_tenant(api)
    n, d = args.messages, args.destinations
    for start in range(0, n, 500):
        batch = [{"from": f"App <app@{tenant.domain}>",
                  "to": [f"user{i}@d{i % d}.latency.example.net"],
                  "subject": f"Bench {i}", "text_body": "Hello from the bench.\n" * 10}
                 for i in range(start, min(n, start + 500))]
        response = api.post("/api/v2/server/messages/batch", {"messages": batch},
                            headers={"X-Server-API-Key": tenant.api_key})
        assert response.status_code == 200, response.text[:300]
    with session_scope() as db:
        ids = [row[0] for row in db.execute(text("SELECT id FROM messages ORDER BY id"))]
    assert len(ids) == n, len(ids)
    counts = _count_calls(args.count)
    queues.set_port(stack.port)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    queues.enqueue_many(queues.DELIVERIES, ids)
    print("GO", flush=True)
    sys.stdin.readline()  # the parent says the sink has every message
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"cpu_ms": cpu * 1000 / n, "wall": wall, "calls": counts}), flush=True)
    os._exit(0)  # the stack's threads and sessions go with the process


def _count_calls(spec: str) -> dict[str, list]:
    """Wrap each ``module:function`` of ``spec`` (comma-separated) to count its calls and
    the thread CPU-ms they took (inclusive)."""
    import functools
    import importlib

    counts: dict[str, list] = {}
    for item in filter(None, spec.split(",")):
        module_name, _, path = item.partition(":")
        module = importlib.import_module(module_name)
        *owners, name = path.split(".")  # a function, or Class.method
        for owner in owners:
            module = getattr(module, owner)
        original = getattr(module, name)
        counts[item] = [0, 0.0]

        def counted(*a, __item=item, __original=original, **k):
            started = time.thread_time()
            try:
                return __original(*a, **k)
            finally:
                entry = counts[__item]
                entry[0] += 1
                entry[1] += (time.thread_time() - started) * 1000

        setattr(module, name, functools.wraps(original)(counted))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the other tree (e.g. main's copy)")
    parser.add_argument("--ours", default=HERE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--destinations", type=int, default=50)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--ports", type=int, default=42000)
    parser.add_argument("--profile", default="")
    parser.add_argument("--count", default="", help="module:function,... calls to count")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--root", default="")
    for name in ("dns-port", "mx-port", "http-port", "smtp-port"):
        parser.add_argument("--" + name, type=int, default=0)
    args = parser.parse_args()
    if args.child:
        return child(args)

    sys.path.insert(0, HERE)
    from bench import latency_rig as rig

    ctx = mp.get_context("spawn")
    counters = rig.Counters(ctx)
    dns_port, sink_port, mx_port = args.ports + 1, args.ports + 2, args.ports + 3
    stop = ctx.Event()
    procs = [ctx.Process(target=_serve_dns, args=(dns_port, args.destinations, stop),
                         daemon=True),
             ctx.Process(target=_serve_sink, args=(counters, sink_port, stop), daemon=True)]
    delay, no_delay = ctx.Value("d", args.delay_ms / 1000), ctx.Value("d", 0.0)
    ready_in, ready_out = ctx.Pipe(False)
    procs.append(ctx.Process(target=rig.serve_proxy, args=(
        args.destinations, mx_port, sink_port, 0, 0, delay, no_delay, ready_out, stop),
        daemon=True))
    for proc in procs:
        proc.start()
    ready_in.recv()
    time.sleep(1.0)
    results: dict[str, list[float]] = {"base": [], "ours": []}
    try:
        for r in range(args.rounds):
            for arm, root in (("base", args.base), ("ours", args.ours)):
                port = _free_pair(args.ports + 100, args.ports + 999)  # HTTP, SMTP
                profile = args.profile if arm == "ours" and r == args.rounds - 1 else ""
                cmd = [sys.executable, os.path.abspath(__file__), "--child", "--root", root,
                       "--base", "-", "--messages", str(args.messages),
                       "--destinations", str(args.destinations), "--dns-port", str(dns_port),
                       "--mx-port", str(mx_port), "--http-port", str(port),
                       "--smtp-port", str(port + 1), "--profile", profile,
                       "--count", args.count]
                env = dict(os.environ, PYTHONPATH=root)
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env, cwd=root)
                line = proc.stdout.readline()
                assert line.strip() == "GO", line
                spy = None
                if profile:  # non-idle samples, collapsed stacks
                    spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable),
                                                         "py-spy"), "record", "--gil", "--nonblocking",
                                            "--format", "raw", "-r", "200", "-o", profile,
                                            "--pid", str(proc.pid)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                target = counters.messages[0] + args.messages
                rig.wait_for(lambda: counters.messages[0], target, "messages", 600)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(timeout=60)
                proc.stdin.write("done\n")
                proc.stdin.flush()
                found = json.loads(proc.stdout.readline())
                proc.wait(timeout=60)
                results[arm].append(found["cpu_ms"])
                print(f"round {r + 1} {arm}: {found['cpu_ms']:.3f} CPU-ms/message, "
                      f"{args.messages / found['wall']:.0f} messages/s"
                      + (f", calls {found['calls']}" if found["calls"] else ""), flush=True)
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=10)
    base, ours = statistics.median(results["base"]), statistics.median(results["ours"])
    print(f"median CPU-ms/message: base {base:.3f}, ours {ours:.3f}, ours/base {ours / base:.3f}")


def _free_pair(first: int, last: int) -> int:
    """A port P in [first, last) with P and P + 1 free on 127.0.0.1 (an earlier round's may
    wait in TIME_WAIT), tried from a random start."""
    import random
    import socket

    span = last - first
    start = random.randrange(span)
    for step in range(span):
        port = first + (start + step) % span
        try:
            for candidate in (port, port + 1):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair")


def _serve_dns(port: int, destinations: int, stop) -> None:
    import socket
    import threading

    sys.path.insert(0, HERE)
    from bench import latency_rig as rig
    from tests.dns_server import LoopbackDNS

    server = LoopbackDNS.__new__(LoopbackDNS)  # on our own port, not an ephemeral one
    server.zone, server.asked = rig.zone(destinations), {}
    server.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.sock.bind(("127.0.0.1", port))
    server.port = port
    threading.Thread(target=server.serve, daemon=True).start()
    stop.wait()


def _serve_sink(counters, port: int, stop) -> None:
    sys.path.insert(0, HERE)
    from bench import latency_rig as rig

    rig.counting_mx(counters, port=port)
    stop.wait()


if __name__ == "__main__":
    main()
