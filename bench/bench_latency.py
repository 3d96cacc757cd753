"""Delivery at internet latency (issue 33): ``make run``'s stack against a plain 100-session
sender, both through the same delay proxy to the same MX, in the same run.

The rig (``bench/latency_rig.py``): one aiosmtpd sink offering PIPELINING that counts the
sessions open per destination and their peak; an asyncio proxy adding a one-way delay to
every chunk in both directions (a round trip costs two delays; connections never wait for
each other); a loopback DNS server (``tests/dns_server.py``) answering the MX and A records
of D recipient domains, each domain's MX host on its own loopback address (127.0.0.10, .11,
...) where the proxy listens, all on one port. The sink, the proxy and the webhook receiver
each run in a process of their own.

Measured, for each round trip (default 50 and 150 ms):

* **service**: ``python -m chalicelib.local`` (what ``make run`` starts, ``bench/make_run.py``)
  with DELIVERY_RELAY=mx, DNS_RESOLVERS=<the loopback DNS>, DELIVERY_MX_PORT=<the proxy's
  port>, on its own database (a fresh SQLite file unless ``--database-url``); a tenant whose
  webhook (MessageSent) points at a receiver behind the proxy with its own delay (default a
  100 ms round trip). After a warm-up of 20 messages to a domain outside the measured ones,
  N messages (default 1,000) to D domains (default 50) go through the batch API (500 a
  request); the clock runs from the first POST until the sink has the N-th message
  (messages/s), and on until the receiver has the N-th signed webhook (webhooks/s). CPU per
  message: the stack's whole process tree (utime+stime, reaped children included) from the
  first POST to the last webhook. Peak sessions: the most sessions any one destination had
  open at once at the sink.
* **reference**: a plain sender in this process, the same N messages as raw bytes (no DKIM,
  no database): ``--reference-sessions`` (default 100, Postfix's default process limit)
  threads with smtplib, each destination's messages split over 100/D sessions, each session
  reused for its share, one command at a time (no pipelining). Ratio = service / reference.
* **What the cores allow**: a stack that is CPU-bound delivers at most cores / (its CPU a
  message + the rig's) whatever the round trip (the rig shares the cores here, unlike a real
  MX); printed for both sides, with the CPU a message the service could spend to match the
  reference's rate on these cores (``--round-trips 0,50,150`` shows whether the rate still
  depends on the round trip at all).
* **Lambda shape** (at the first round trip above 0): the deliveries worker's batch handler in this
  process (``dispatch.dispatch_batch("deliveries", bodies)``, as ``bench_pipeline_lambda.py``
  and the Lambda handler run it) on the wake-ups of 10 messages to 10 fresh destinations,
  against the same for one message; median wall time of ``--lambda-rounds`` rounds, on
  ``--lambda-database-url`` (default PostgreSQL ``bench_lat``, the deployed database).
* **Postfix + OpenDKIM** (``--postfix``, loopback, no delay): a private Postfix instance
  (its own config and queue directories under a temp dir, free ports) with OpenDKIM as its
  milter, relaying to the sink, against ``make run``'s SMTP gateway + delivery relaying to
  the same sink (DELIVERY_RELAY=<the sink>); ``--postfix-messages`` (default 2,000) submitted
  over 10 sessions; messages/s from the first submission until the sink has them all, CPU
  per message of each one's process tree (Postfix: its master and every child, OpenDKIM).
  ``--postfix-round-trip MS``: both relay through the delay proxy instead (one next hop at
  that round trip: a smarthost, or one big receiver), Postfix with 100 sessions to it.
  See ``bench/postfix_rig.py``.

The machine is shared and noisy: read the ratios, not the absolute figures. Nothing is
written into the repository; ``--results`` prints a markdown block for bench/RESULTS.md.

Run: .venv/bin/python bench/bench_latency.py [--quick] [--messages 1000] [--destinations 50]
     [--round-trips 50,150] [--hook-round-trip 100] [--no-lambda] [--postfix]
     [--postfix-round-trip 0] [--results]
     [--set KEY=VALUE ...]   (a setting of the service's stack, e.g. --set WORKER_THREADS=8)"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_module
import signal
import smtplib
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import latency_rig as rig  # noqa: E402
from bench.common import ADMIN_KEY, STACK_ENV  # noqa: E402
from bench.latency_rig import new_database_url, wait_for  # noqa: E402

BATCH = 500
WARM_UP = 20
LAMBDA_BATCH = 10
LAMBDA_BIG, LAMBDA_BIG_DESTINATIONS = 100, 50  # the deliveries mapping's batch since issue 33
DEFAULT_LAMBDA_URL = "postgresql+pg8000://postgres@127.0.0.1:5432/bench_lat"
BODY = "Hello from the latency bench.\n" * 30  # ~1 KB


class Rig:
    """The sink, the webhook receiver, the proxy (each a process) and the DNS server (a
    thread of this process) for ``total`` domains (at least ``destinations``, the ones the
    service and the reference send to) plus one warm-up domain."""

    def __init__(self, destinations: int, mx_round_trip_ms: float, hook_round_trip_ms: float,
                 total: int = 0):
        from bench.bench_pipeline import sink_main
        from tests.dns_server import LoopbackDNS

        self.destinations = destinations
        self.total = total = max(total, destinations)
        self.ctx = ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.counters = rig.Counters(ctx)
        self.hooks = ctx.Array("q", 2, lock=False)  # [unused, signed MessageSent webhooks]
        self.procs = []
        self.sink_port = self._spawn(rig.serve_sink, self.counters)
        receiver_url = self._spawn(sink_main, "rx", None, self.hooks, self.stop, ready_at=1)
        receiver_port = int(receiver_url.split(":")[2].split("/")[0])
        self.mx_delay = ctx.Value("d", mx_round_trip_ms / 2000, lock=False)
        self.hook_delay = ctx.Value("d", hook_round_trip_ms / 2000, lock=False)
        addresses = [rig.destination_address(k) for k in range(total + 1)]
        self.mx_port = rig.free_port_on(addresses + [rig.HOOK_ADDRESS])
        self._spawn(rig.serve_proxy, total + 1, self.mx_port, self.sink_port,
                    self.mx_port, receiver_port, self.mx_delay, self.hook_delay)
        self.hook_url = f"http://{rig.HOOK_ADDRESS}:{self.mx_port}/hook"
        self.dns = LoopbackDNS(rig.zone(total + 1))

    def _spawn(self, target, *args, ready_at: int | None = None):
        ready_recv, ready_send = self.ctx.Pipe(duplex=False)
        args = list(args)
        if ready_at is None:
            args += [ready_send, self.stop]
        else:  # sink_main(kind, ready, counts, stop)
            args[ready_at] = ready_send
        proc = self.ctx.Process(target=target, args=tuple(args), daemon=True)
        proc.start()
        self.procs.append(proc)
        if not ready_recv.poll(60):
            raise RuntimeError(f"{target.__name__} did not start")
        return ready_recv.recv()

    def rig_cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each of the rig's own processes (the sink, the webhook
        receiver, the delay proxy): on the same cores as the service, unlike a real MX."""
        from bench.make_run import tree_cpu
        return {name: tree_cpu(proc.pid)
                for name, proc in zip(("sink", "receiver", "proxy"), self.procs)}

    def set_round_trip(self, ms: float) -> None:
        self.mx_delay.value = ms / 2000

    @property
    def warm_domain(self) -> int:
        return self.total

    def service_env(self) -> dict:
        return {**STACK_ENV, "DELIVERY_RELAY": "mx",
                "DNS_RESOLVERS": f"127.0.0.1:{self.dns.port}",
                "DELIVERY_MX_PORT": str(self.mx_port),
                "WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true", "TRACKING_MACHINE_SECONDS": "0"}

    def close(self) -> None:
        self.stop.set()
        self.dns.close()
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def entries(sender: str, destinations: list[int], tag: str, first: int = 0) -> list[dict]:
    return [{"from": f"App <{sender}>", "to": [f"user{first + i}@{rig.destination_domain(k)}"],
             "subject": f"Latency {tag} {first + i}", "text_body": BODY, "tag": tag}
            for i, k in enumerate(destinations)]


def post_messages(api, tenant, destinations: list[int], tag: str) -> list[dict]:
    """POST the batch API in requests of BATCH; returns the accepted entries' answers."""
    answers = []
    for start in range(0, len(destinations), BATCH):
        chunk = destinations[start:start + BATCH]
        response = api.post("/api/v2/server/messages/batch",
                            {"messages": entries(f"app@{tenant.domain}", chunk, tag, start)},
                            headers={"X-Server-API-Key": tenant.api_key})
        data = response.json().get("data", {})
        assert response.status_code == 200 and data.get("failed") == 0, response.text[:500]
        answers.append(data)
    return answers


def spread(n: int, destinations: int) -> list[int]:
    return [i % destinations for i in range(n)]


# --------------------------------------------------------------------------- the service

def measure_service(world: Rig, n: int, database_url: str, folder: str, label: str,
                    extra_env: dict | None = None, profile: str = "") -> dict:
    """One ``make run`` phase: N messages to the destinations at the current round trip.
    ``profile``: py-spy records the stack's process tree over the timed part into that file
    (collapsed stacks; ``bench/profile_summary.py`` reads it)."""
    from bench.bench_pipeline import start_profile
    from bench.make_run import MakeRun, describe, tree_cpu, tree_cpu_split
    from tests.support import Api, make_tenant

    env = {**world.service_env(), "DATABASE_URL": new_database_url(folder, label, database_url),
           "SIGNING_KEY_PATH": os.path.join(folder, label + "-key.pem"), **(extra_env or {})}
    stack = MakeRun(env).start()
    counters, hooks = world.counters, world.hooks
    try:
        api = Api(stack.base_url, ADMIN_KEY)
        tenant = make_tenant(api)
        api.post(tenant.server_path + "/webhooks", {"name": "bench", "url": world.hook_url,
                                                    "events": ["MessageSent"]}
                 ).raise_for_status()
        sent0, hooks0 = counters.messages[0], hooks[1]
        post_messages(api, tenant, [world.warm_domain] * WARM_UP, label + "-warm")
        wait_for(lambda: counters.messages[0], sent0 + WARM_UP, "warm-up messages")
        wait_for(lambda: hooks[1], hooks0 + WARM_UP, "warm-up webhooks")
        sent0, hooks0 = counters.messages[0], hooks[1]
        counters.reset_peaks()
        spy = start_profile(stack.pid, profile) if profile else None
        cpu0 = tree_cpu(stack.pid)
        split0 = tree_cpu_split(stack.pid)
        rig0 = world.rig_cpu()
        started = time.perf_counter()
        post_messages(api, tenant, spread(n, world.destinations), label)
        delivered = wait_for(lambda: counters.messages[0], sent0 + n, "messages")
        cpu_delivered = tree_cpu(stack.pid) - cpu0
        peaks = counters.peaks(world.destinations)
        notified = wait_for(lambda: hooks[1], hooks0 + n, "webhooks")
        cpu = tree_cpu(stack.pid) - cpu0
        system_cpu = tree_cpu_split(stack.pid)[1] - split0[1]
        rig_cpu = {k: v - rig0[k] for k, v in world.rig_cpu().items()}
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        processes = describe(stack.pid)
    finally:
        stack.stop()
    return {"rate": n / (delivered - started), "hook_rate": n / (notified - started),
            "cpu_ms": 1000 * cpu / n, "cpu_delivered_ms": 1000 * cpu_delivered / n,
            "rig_cpu_ms": 1000 * sum(rig_cpu.values()) / n,
            "rig_parts": {k: 1000 * v / n for k, v in rig_cpu.items()}, "system_cpu_ms": 1000 * system_cpu / n,
            "peak": max(peaks), "peak_mean": statistics.mean(peaks), "tree": processes}


# --------------------------------------------------------------------------- the reference

def raw_message(n: int, domain: str) -> bytes:
    return (f"From: App <app@example.com>\r\nTo: user{n}@{domain}\r\nSubject: Latency ref {n}"
            f"\r\nDate: Mon, 01 Jan 2024 00:00:00 +0000\r\nMessage-ID: <ref{n}@bench.test>\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
            + BODY.replace("\n", "\r\n")).encode()


def reference_sender(world: Rig, n: int, sessions: int) -> dict:
    """The plain sender: ``sessions`` threads, each destination's messages split over
    sessions/D sessions, one reused session per share, one command at a time."""
    d = world.destinations
    per_destination = max(1, sessions // d)
    shares: queue_module.Queue = queue_module.Queue()
    by_destination: dict[int, list[int]] = {}
    for i, k in enumerate(spread(n, d)):
        by_destination.setdefault(k, []).append(i)
    for k, numbers in by_destination.items():
        for part in range(per_destination):
            if numbers[part::per_destination]:
                shares.put((k, numbers[part::per_destination]))
    errors: list[str] = []

    def work() -> None:
        while True:
            try:
                k, numbers = shares.get_nowait()
            except queue_module.Empty:
                return
            domain = rig.destination_domain(k)
            try:
                with smtplib.SMTP(rig.destination_address(k), world.mx_port,
                                  local_hostname="ref.bench.test", timeout=120) as smtp:
                    for number in numbers:
                        smtp.sendmail("bounce@example.com", [f"user{number}@{domain}"],
                                      raw_message(number, domain))
            except (OSError, smtplib.SMTPException) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    sent0 = world.counters.messages[0]
    world.counters.reset_peaks()
    threads = [threading.Thread(target=work) for _ in range(min(sessions, shares.qsize()))]
    cpu0 = time.process_time()
    rig0 = world.rig_cpu()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    rig_cpu = {k: v - rig0[k] for k, v in world.rig_cpu().items()}
    assert not errors, errors[:3]
    got = world.counters.messages[0] - sent0
    assert got == n, (got, n)
    peaks = world.counters.peaks(d)
    return {"rate": n / elapsed, "cpu_ms": 1000 * cpu / n, "peak": max(peaks),
            "rig_cpu_ms": 1000 * sum(rig_cpu.values()) / n,
            "rig_parts": {k: 1000 * v / n for k, v in rig_cpu.items()},
            "sessions": len(threads)}


# --------------------------------------------------------------------------- the Lambda shape

class RecordingPort:
    """A queue port that keeps the wake-ups instead of sending them: the bench hands them
    to the deliveries handler itself, as SQS would hand a batch to a Lambda."""

    def __init__(self):
        self.sent: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def send(self, queue, body, delay_seconds=0):
        import json

        with self.lock:
            self.sent.append((queue, body if isinstance(body, str) else json.dumps(body)))

    def take(self, queue: str) -> list[str]:
        with self.lock:
            taken = [b for q, b in self.sent if q == queue]
            self.sent = [(q, b) for q, b in self.sent if q != queue]
        return taken


def lambda_destinations(rounds: int) -> int:
    return (rounds + 1) * (LAMBDA_BATCH + 1) + LAMBDA_BIG_DESTINATIONS


def measure_lambda(world: Rig, url: str, rounds: int) -> dict:
    """Wall time of the deliveries handler on a batch of 10 messages to 10 destinations
    against one message, median of ``rounds``, each round on destinations not used before
    (no session cached from an earlier round); then once a batch of 100 messages (the
    deliveries mapping's batch) to 50 fresh destinations, two each."""
    from sqlalchemy import create_engine  # noqa: F401  (the app's imports, before timing)

    from bench.bench_pipeline import ensure_database, start_acceptor
    from bench.common import prepare_database
    from chalicelib import queues
    from chalicelib.db import migrate
    from chalicelib.workers import dispatch
    from tests.support import make_tenant

    assert world.total >= lambda_destinations(rounds), "too few destinations for the Lambda phase"
    if url.startswith("postgresql"):
        ensure_database(url)
    prepare_database(url, **world.service_env())
    migrate.upgrade(url)
    acceptor, api = start_acceptor()
    port = RecordingPort()
    queues.set_port(port)
    dispatch.load_workers()
    try:
        tenant = make_tenant(api)
        fresh = iter(range(world.total))

        def run(destinations: list[int], tag: str) -> float:
            post_messages(api, tenant, destinations, tag)
            bodies = port.take("deliveries")
            assert bodies, "no deliveries wake-up recorded"
            sent0 = world.counters.messages[0]
            started = time.perf_counter()
            outcome = dispatch.dispatch_batch("deliveries", bodies)
            elapsed = time.perf_counter() - started
            got = world.counters.messages[0] - sent0
            assert got == len(destinations), (got, destinations, outcome)
            port.take("webhooks")
            return elapsed

        run([next(fresh) for _ in range(LAMBDA_BATCH + 1)], "lambda-warm")  # imports, caches
        singles, batches = [], []
        for r in range(rounds):
            singles.append(run([next(fresh)], f"lambda-one-{r}"))
            batches.append(run([next(fresh) for _ in range(LAMBDA_BATCH)], f"lambda-ten-{r}"))
        big = [next(fresh) for _ in range(LAMBDA_BIG_DESTINATIONS)]
        hundred = run([big[i % len(big)] for i in range(LAMBDA_BIG)], "lambda-hundred")
    finally:
        acceptor.stop()
    one, ten = statistics.median(singles), statistics.median(batches)
    return {"one": one, "ten": ten, "ratio": ten / one, "rounds": rounds, "hundred": hundred}


# --------------------------------------------------------------------------- webhooks

DEFAULT_WEBHOOKS_URL = "postgresql+pg8000://postgres@127.0.0.1:5432/test_bench"


def measure_webhooks(delay_ms: float, n: int, url: str) -> dict | None:
    """``bench_webhooks.measure`` (worker threads taking batches of 10 rows, as one worker
    process does, against a receiver answering after ``delay_ms``) in a process of its own
    (it sets the app's environment up for its database); None when that bench has no
    ``measure``."""
    import json
    import subprocess

    from bench import bench_webhooks

    if not hasattr(bench_webhooks, "measure"):
        return None
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from bench.bench_webhooks import measure; "
            "print(json.dumps(measure(float(sys.argv[2]), int(sys.argv[3]), "
            "database_url=sys.argv[4])))")
    out = subprocess.run([sys.executable, "-c", code, ROOT, str(delay_ms), str(n), url],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if out.returncode:  # reported in the table, the other figures kept
        print(out.stderr[-3000:], file=sys.stderr)
        return {"error": out.stderr.strip().splitlines()[-1][:200] if out.stderr.strip()
                else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- output

#: The cores this process may run on (the stack, the rig and the reference share them).
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def ceiling(measured: dict) -> float:
    """Messages/s the cores allow at a run's CPU a message, its own and the rig's."""
    return CORES * 1000 / (measured["cpu_ms"] + measured["rig_cpu_ms"])


def budget(ours: dict, ref: dict) -> float:
    """The service's CPU-ms a message at which the cores would allow the reference's rate,
    the rig's CPU for the service's traffic counted (it shares the cores here)."""
    return CORES * 1000 / ref["rate"] - ours["rig_cpu_ms"]


def parts(measured: dict) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in measured["rig_parts"].items() if v >= 0.05)


def table(figures: dict, args) -> list[str]:
    lines = ["| measure | service | reference | ratio | aim |", "|---|---|---|---|---|"]
    for rtt, got in figures["latency"].items():
        ours, ref = got["service"], got["reference"]
        lines += [
            f"| messages/s at {rtt:g} ms RTT | {ours['rate']:.1f} | {ref['rate']:.1f} "
            f"({ref['sessions']} sessions) | {ours['rate'] / ref['rate']:.2f} | >= 1.0 (stretch 2) |",
            f"| CPU-ms/msg at {rtt:g} ms (service: process tree incl. webhooks; "
            f"reference: its threads, no DKIM/DB) | {ours['cpu_ms']:.1f} "
            f"(to delivered: {ours['cpu_delivered_ms']:.1f}; in the kernel: "
            f"{ours['system_cpu_ms']:.1f}) | {ref['cpu_ms']:.1f} | — "
            f"(not like for like) | — |",
            f"| CPU-ms/msg of the rig during the service's phase (sink, delay proxy, webhook "
            f"receiver: on the same cores, unlike a real MX) | {ours['rig_cpu_ms']:.1f} "
            f"({parts(ours)}) | {ref['rig_cpu_ms']:.1f} ({parts(ref)}) | — | — |",
            # What the cores allow: a CPU-bound stack cannot beat cores / (its CPU + the
            # rig's, which shares the cores here) whatever the round trip; and the CPU a
            # message the service could spend to match the reference's rate on these cores.
            f"| messages/s these {CORES} cores allow at these CPU costs (cores / (CPU-ms/msg "
            f"+ the rig's)) | {ceiling(ours):.0f} | {ceiling(ref):.0f} | "
            f"{ceiling(ours) / ref['rate']:.2f} (of the reference's measured rate) | — |",
            f"| CPU-ms/msg the service could spend to match the reference's rate here "
            f"(cores / its rate, less the rig's CPU-ms/msg for the service's traffic) | "
            f"{ours['cpu_ms']:.1f} (spent) | {budget(ours, ref):.1f} (budget) | "
            f"{ours['cpu_ms'] / budget(ours, ref):.1f}x the budget | — |"
            if budget(ours, ref) > 0 else
            f"{ours['cpu_ms']:.1f} (spent) | none: the rig alone needs more | — | — |",
            f"| peak sessions per destination at {rtt:g} ms (max; service mean) | "
            f"{ours['peak']} (mean {ours['peak_mean']:.1f}) | {ref['peak']} | — | "
            f"<= DELIVERY_PACING_CONNECTIONS |",
            f"| webhooks/s, receiver at {args.hook_round_trip:g} ms RTT, against messages/s "
            f"at {rtt:g} ms | {ours['hook_rate']:.1f} | {ours['rate']:.1f} (messages/s) | "
            f"{ours['hook_rate'] / ours['rate']:.2f} | ~1.0 (keeps pace) |"]
    if figures.get("webhooks", {}).get("error"):
        lines.append(f"| webhooks/s, bench_webhooks.measure | failed: "
                     f"{figures['webhooks']['error']} | | | |")
    elif figures.get("webhooks"):
        hook = figures["webhooks"]
        rtt = next((r for r in figures["latency"] if r > 0), next(iter(figures["latency"])))
        rate = figures["latency"][rtt]["service"]["rate"]
        lines.append(f"| webhooks/s, bench_webhooks.measure ({hook['threads']} worker threads, "
                     f"as one worker process; WEBHOOKS_CONCURRENCY={hook['concurrency']}; "
                     f"receiver answering after {hook['delay_ms']:g} ms; {hook['n']} rows), "
                     f"against make run's messages/s at {rtt:g} ms | "
                     f"{hook['webhooks_per_s']:.1f} | {rate:.1f} (messages/s) | "
                     f"{hook['webhooks_per_s'] / rate:.2f} | >= 1.0 (keeps pace) |")
    if figures.get("lambda"):
        lam = figures["lambda"]
        lines.append(f"| Lambda shape at {lam['rtt']:g} ms: deliveries handler, batch of "
                     f"{LAMBDA_BATCH} to {LAMBDA_BATCH} destinations vs 1 message (median of "
                     f"{lam['rounds']}) | {1000 * lam['ten']:.0f} ms | {1000 * lam['one']:.0f} ms"
                     f" | {lam['ratio']:.2f} | <= 2 |")
        lines.append(f"| Lambda shape at {lam['rtt']:g} ms: a batch of {LAMBDA_BIG} to "
                     f"{LAMBDA_BIG_DESTINATIONS} destinations (the deliveries mapping's batch), "
                     f"against 1 message | {1000 * lam['hundred']:.0f} ms "
                     f"({LAMBDA_BIG / lam['hundred'] * 3600:,.0f} deliveries an hour per "
                     f"concurrency, in this process) | {1000 * lam['one']:.0f} ms | "
                     f"{lam['hundred'] / lam['one']:.2f} | — |")
    if figures.get("postfix"):
        pf = figures["postfix"]
        if pf.get("error"):
            lines.append(f"| Postfix + OpenDKIM | not measured: {pf['error']} | | | |")
        else:
            where = f"{pf['round_trip']:g} ms RTT to the MX" if pf.get("round_trip") else \
                "loopback"
            lines += [
                f"| SMTP submission to delivery, {pf['n']} messages, {where}: messages/s "
                f"(service: gateway + delivery; reference: Postfix + OpenDKIM) | "
                f"{pf['service']['rate']:.1f} | {pf['postfix']['rate']:.1f} | "
                f"{pf['service']['rate'] / pf['postfix']['rate']:.2f} | — |",
                f"| same, CPU-ms/msg (process trees) | {pf['service']['cpu_ms']:.1f} | "
                f"{pf['postfix']['cpu_ms']:.1f} | "
                f"{pf['service']['cpu_ms'] / pf['postfix']['cpu_ms']:.2f} | — |"]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Delivery at internet latency: make run "
                                     "against a 100-session plain sender (see the docstring).")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--destinations", type=int, default=50)
    parser.add_argument("--round-trips", default="50,150", help="MX round trips in ms")
    parser.add_argument("--hook-round-trip", type=float, default=100.0,
                        help="the webhook receiver's round trip in ms")
    parser.add_argument("--reference-sessions", type=int, default=100)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", ""),
                        help="make run's database (emptied); default a fresh SQLite file "
                        "per phase, as make run's own default")
    parser.add_argument("--lambda-database-url", default=DEFAULT_LAMBDA_URL)
    parser.add_argument("--lambda-rounds", type=int, default=3)
    parser.add_argument("--no-lambda", action="store_true")
    parser.add_argument("--webhooks-database-url", default=DEFAULT_WEBHOOKS_URL,
                        help="the database bench_webhooks.measure empties and uses")
    parser.add_argument("--webhook-rows", type=int, default=400)
    parser.add_argument("--postfix", action="store_true",
                        help="also Postfix + OpenDKIM against the gateway (loopback)")
    parser.add_argument("--postfix-messages", type=int, default=2000)
    parser.add_argument("--postfix-round-trip", type=float, default=0.0, metavar="MS",
                        help="relay both sides of --postfix through the delay proxy at this "
                        "round trip (Postfix with 100 sessions to it); 0: loopback")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the service's stack (repeatable), e.g. "
                        "--set WORKER_THREADS=8")
    parser.add_argument("--quick", action="store_true",
                        help="200 messages, 24 destinations, 50 ms only, 1 Lambda round, "
                        "300 Postfix messages")
    parser.add_argument("--profile", default="", metavar="PREFIX",
                        help="py-spy the stack over each timed phase into PREFIX-<rtt>.txt")
    parser.add_argument("--results", action="store_true",
                        help="print a markdown block for bench/RESULTS.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.destinations, args.round_trips = 200, 24, "50"
        args.lambda_rounds, args.postfix_messages, args.webhook_rows = 1, 300, 200
    round_trips = [float(v) for v in args.round_trips.split(",")]
    settings = dict(item.split("=", 1) for item in args.set)
    import logging

    logging.disable(logging.WARNING)
    folder = tempfile.mkdtemp(prefix="bench-latency-")
    world = Rig(args.destinations, round_trips[0], args.hook_round_trip,
                0 if args.no_lambda else lambda_destinations(args.lambda_rounds))
    figures: dict = {"latency": {}}
    try:
        for rtt in round_trips:
            world.set_round_trip(rtt)
            service = measure_service(world, args.messages, args.database_url, folder,
                                      f"rtt{rtt:g}", settings,
                                      f"{args.profile}-{rtt:g}.txt" if args.profile else "")
            reference = reference_sender(world, args.messages, args.reference_sessions)
            figures["latency"][rtt] = {"service": service, "reference": reference}
            print(f"{rtt:g} ms: service {service['rate']:.1f}/s, reference "
                  f"{reference['rate']:.1f}/s ({service['tree']})", file=sys.stderr)
        if args.postfix:
            from bench import postfix_rig

            figures["postfix"] = postfix_rig.compare(world, args.postfix_messages, folder,
                                                     args.database_url, settings,
                                                     args.postfix_round_trip)
        figures["webhooks"] = measure_webhooks(args.hook_round_trip, args.webhook_rows,
                                               args.webhooks_database_url) or {}
        if not args.no_lambda:  # at the first round trip that is one (its aim is at 50 ms)
            shape_rtt = next((rtt for rtt in round_trips if rtt > 0), round_trips[0])
            world.set_round_trip(shape_rtt)
            figures["lambda"] = {**measure_lambda(world, args.lambda_database_url,
                                                  args.lambda_rounds), "rtt": shape_rtt}
    finally:
        world.close()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)  # the phases' databases, Postfix's queue
    shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "make run's defaults"
    head = (f"delivery at latency: {args.messages} messages to {args.destinations} destinations, "
            f"{shown}"
            f", {'SQLite' if not args.database_url else 'PostgreSQL'}; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (a shared, noisy machine: read "
            "the ratios)")
    lines = table(figures, args)
    if args.results:
        print(f"```\n$ .venv/bin/python bench/bench_latency.py {' '.join(argv or sys.argv[1:])}"
              f"\n```\n\n{head}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    else:
        print(head)
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
