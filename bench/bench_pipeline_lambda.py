"""Queue workers as Lambda runs them, without Lambda: worker *processes* that each take up to 10
wake-ups at a time from one shared multiprocessing queue (an SQS batch) and hand them to the
dispatcher the Lambda handlers use, while the accepting API runs in the bench's own process.

This is the deployed shape (API Gateway + SQS + Lambda concurrency), not what ``make run``
starts (bench_pipeline.py measures that). bench_rls.py uses it for its pipeline arm: both of
its arms run the same workers, so the policies' cost is the only difference. Run alone it
measures issue 16's figures (worker processes 1, 2, 4 against bench_pipeline.py's reference
loop in the same round; bench/RESULTS.md "Pipeline").

Run: .venv/bin/python bench/bench_pipeline_lambda.py [--messages 1000] [--workers 1,2,4]
     [--rounds 1]   (BENCH_DATABASE_URL as bench_pipeline.py)"""
from __future__ import annotations

import os
import queue as queue_module
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_pipeline import make_bench_tenant, post_batches, wait_count  # noqa: E402
from bench.common import ADMIN_KEY  # noqa: E402

SQS_BATCH = 10


def start_stack(hook_url: str):
    """The local stack in this process (its queue a NullPort until a phase starts) and a
    tenant whose webhook receives every MessageSent; returns (stack, admin Api client,
    tenant)."""
    from app import app
    from bench.common import NullPort
    from chalicelib import queues
    from chalicelib.local.stack import LocalStack
    from tests.support import Api, free_port

    stack = LocalStack(app, http_port=0, smtp_port=free_port(), sweep_interval=3600).start()
    queues.set_port(NullPort())
    try:
        api = Api(stack.base_url, ADMIN_KEY)
        tenant = make_bench_tenant(api, hook_url)
    except BaseException:
        stack.stop()
        raise
    return stack, api, tenant


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


def main() -> None:
    """Issue 16's measure: N messages accepted by the API in this process, delivered by 1, 2,
    4... worker processes, against bench_pipeline.py's reference loop in the same round."""
    import argparse

    from sqlalchemy import create_engine

    from bench.bench_pipeline import (DEFAULT_URL, check, measure_reference, prepare_world,
                                      settle_stats, stop_sinks, tenant_domain)
    from bench.common import NullPort

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    assert url.startswith("postgresql"), "the pipeline bench measures PostgreSQL"
    ctx, sinks, counts, stop, relay, hook_url = prepare_world(url)
    from chalicelib import queues
    from chalicelib.db import migrate

    migrate.upgrade(url)
    stack, api, tenant = start_stack(hook_url)
    engine = create_engine(url)
    lines = []
    try:
        domain = tenant_domain(tenant)
        n = args.messages
        sent = hooks = 0
        for round_no in range(args.rounds):
            queues.set_port(NullPort())
            ref = measure_reference(api, tenant, engine, relay, hook_url, domain, n)
            ref_rate = ref["rate"]
            sent, hooks = sent + n, hooks + n
            lines.append(f"| reference loop | {ref_rate:.0f}/s | 1.00 | {ref['commits']:.2f} | "
                         f"{ref['cpu']:.2f} (whole loop) |")
            for workers in [int(w) for w in args.workers.split(",")]:
                tag = f"r{round_no}w{workers}"
                c0, _ = settle_stats(engine)
                seconds, accept_cpu, worker_cpu, _ = run_workers(ctx, api, tenant, counts,
                                                                 workers, n, tag, (sent, hooks))
                sent, hooks = sent + n, hooks + n
                c1, _ = settle_stats(engine)
                check(engine, tag, n)
                lines.append(
                    f"| {workers} worker process{'es' if workers > 1 else ''} | "
                    f"{n / seconds:.0f}/s | {n / seconds / ref_rate:.2f} | {(c1 - c0) / n:.2f} | "
                    f"{1000 * accept_cpu / n:.2f} / "
                    f"{1000 * worker_cpu.get('deliveries', 0) / n:.2f} / "
                    f"{1000 * worker_cpu.get('webhooks', 0) / n:.2f} |")
    finally:
        stack.stop()
        stop_sinks(stop, sinks)
        engine.dispose()
    print(f"pipeline, Lambda-shaped workers, PostgreSQL, {args.messages} messages per phase; "
          f"ratio = ours / reference; load average {os.getloadavg()[0]:.1f}")
    print("| run | messages/s | ratio | commits/msg | CPU-ms/msg accept / deliver / notify |")
    print("|---|---|---|---|---|")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
