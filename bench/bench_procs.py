"""`make run`'s processes: the same messages through `python -m chalicelib.local` with worker
threads in one process (WORKER_PROCESSES=0, the baseline) and with worker processes (and
more HTTP processes), in the same run, interleaved.

Each round starts the stack on a fresh database (PostgreSQL beside BENCH_DATABASE_URL, or a
SQLite file with --sqlite), makes a tenant with a webhook, and sends MESSAGES messages
through the batch endpoint (batches of 250, two clients at once) to a loopback aiosmtpd MX;
it times acceptance (every POST answered) and the whole run (every message at the MX and
every MessageSent webhook received), and the CPU seconds of the stack's processes per
message. Figures are ratios against the baseline's best round.

    BENCH_DATABASE_URL=postgresql+pg8000://postgres@127.0.0.1:5432/<db> \\
        .venv/bin/python bench/bench_procs.py [--sqlite] [--messages 1000] [--rounds 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import bench_database_url  # noqa: E402
from bench.make_run import tree_cpu  # noqa: E402
from tests.processes import running, send_batches, sent_events  # noqa: E402
from tests.support import make_tenant, wait_for  # noqa: E402
from tests.support.webhooks import create_webhook  # noqa: E402

CONFIGS = {
    "1 process (WORKER_PROCESSES=0)": {"WORKER_PROCESSES": "0"},
    "2 workers, 1 HTTP": {"WORKER_PROCESSES": "2", "HTTP_PROCESSES": "1"},
    "2 workers, 2 HTTP": {"WORKER_PROCESSES": "2", "HTTP_PROCESSES": "2"},
}
# The sweeper idle and claims at their defaults, as a user's `make run`; fewer log lines.
QUIET = {"SWEEP_INTERVAL_SECONDS": "30", "SWEEP_REWAKE_SECONDS": "900",
         "CLAIM_TIMEOUT_SECONDS": "960", "LOG_LEVEL": "WARNING"}


def one_round(env: dict, messages: int, sqlite: bool) -> tuple[float, float, float]:
    """(seconds to accept, seconds end to end, CPU seconds of the stack's processes)."""
    with running(Path(tempfile.mkdtemp()), sqlite=sqlite, beside=bench_database_url(),
                 **QUIET, **env) as (stack, mx, receiver):
        tenant = make_tenant(stack.api)
        create_webhook(stack.api, tenant, receiver.url)
        cpu, own = tree_cpu(stack.proc.pid), time.process_time()
        start = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            parts = list(pool.map(lambda _: send_batches(stack, tenant, messages // 2, 250),
                                  range(2)))
        accepted = time.perf_counter() - start
        ids = [i for part in parts for i in part]
        # Cheap polls (a length): the MX and the receiver share this process's GIL, and
        # parsing every webhook body at each poll slowed them down.
        wait_for(lambda: len(mx.messages) >= len(ids), 600, 0.05, message="every delivery")
        wait_for(lambda: len(receiver.requests) >= len(ids), 600, 0.05,
                 message="every webhook")
        elapsed, spent = time.perf_counter() - start, tree_cpu(stack.proc.pid) - cpu
        # This process (MX, receiver, clients): near one core means it, not the stack, limits.
        print(f"  {env}: {elapsed:.1f} s, this process {time.process_time() - own:.1f} CPU s",
              flush=True)
        wait_for(lambda: set(ids) <= set(sent_events(receiver)), 600, 0.5,
                 message="a MessageSent webhook for every message")
        return accepted, elapsed, spent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CONFIGS}
    for _ in range(args.rounds):
        for name, env in CONFIGS.items():
            results[name].append(one_round(env, args.messages, args.sqlite))
    baseline = results[next(iter(CONFIGS))]
    base_accept = min(r[0] for r in baseline)
    base_total = min(r[1] for r in baseline)
    base_cpu = min(r[2] for r in baseline)
    db = "SQLite" if args.sqlite else "PostgreSQL"
    print(f"{args.messages} messages, {db}, best of {args.rounds} (load "
          f"{os.getloadavg()[0]:.1f})")
    print("| stack | accepted msg/s | x baseline | end to end msg/s | x baseline "
          "| CPU ms/msg | x baseline |")
    print("|---|---|---|---|---|---|---|")
    for name, rounds in results.items():
        accept = min(r[0] for r in rounds)
        total = min(r[1] for r in rounds)
        cpu = min(r[2] for r in rounds)
        print(f"| {name} | {args.messages / accept:.0f} | {base_accept / accept:.2f}x "
              f"| {args.messages / total:.0f} | {base_total / total:.2f}x "
              f"| {1000 * cpu / args.messages:.2f} | {cpu / base_cpu:.2f}x |")


if __name__ == "__main__":
    main()
