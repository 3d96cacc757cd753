"""Shared bench helpers: best-of-N timing and the table row every bench prints.

Figures are ratios against a baseline measured in the same run, because the machines are
shared and noisy; absolute numbers are printed for context only."""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Callable

DEFAULT_BENCH_DB = "postgresql+pg8000://postgres@127.0.0.1:5432/test"


def bench_database_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL", DEFAULT_BENCH_DB)


ADMIN_KEY = "bench-admin-key-0123456789abcdef"

#: The environment of a bench that drives the local stack over HTTP and SMTP.
STACK_ENV = {"ADMIN_API_KEY": ADMIN_KEY, "QUEUE_BACKEND": "local",
             "SMTP_HOSTNAME": "mx.bench.test", "LOG_LEVEL": "WARNING",
             # the tenants the benches make send from *.example.com, as the tests' do
             "RESERVED_DOMAINS_ALLOWED": "example.com,example.net,example.org,example"}


def prepare_database(url: str, **env: str) -> None:
    """Point the app at ``url`` with a fresh signing key (plus ``env``) and empty the database:
    on PostgreSQL the public schema is dropped and re-created."""
    import tempfile

    from sqlalchemy import create_engine, text

    os.environ.update({"DATABASE_URL": url,
                       "SIGNING_KEY_PATH": os.path.join(tempfile.mkdtemp(), "key.pem"), **env})
    if url.startswith("postgresql"):
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()


class NullPort:
    """A queue port that drops wake-ups, so no worker competes for the CPU while accepting."""

    def send(self, queue, body, delay_seconds=0):
        pass


def start_stack():
    """The local stack (HTTP API + SMTP gateway, sweeper idle) with the queue replaced by a
    NullPort; returns ``(stack, api, tenant)``: an admin Api client and a fresh tenant."""
    from app import app
    from chalicelib import queues
    from chalicelib.local.stack import LocalStack
    from tests.support import Api, free_port, make_tenant

    stack = LocalStack(app, http_port=0, smtp_port=free_port(), sweep_interval=3600).start()
    queues.set_port(NullPort())
    try:
        api = Api(stack.base_url, ADMIN_KEY)
        return stack, api, make_tenant(api)
    except BaseException:
        stack.stop()
        raise


def py_spy_prefix(path: str) -> list[str]:
    """What to put before a child's command to run it under py-spy: the samples of threads
    holding the GIL (Python's own CPU, every thread) at 500 Hz, into ``path`` as collapsed
    stacks (for bench/profile_summary.py)."""
    return [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--gil", "-r",
            "500", "-f", "raw", "-o", path, "--"]


def last_json(out: str) -> dict:
    """A child's figures: the last line of its output that is a JSON object (under py-spy,
    py-spy's own lines follow it)."""
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def rate(fn: Callable[[], None], *, seconds: float = 1.0, rounds: int = 3) -> float:
    """Best operations per second over ``rounds`` rounds of about ``seconds`` each."""
    best = 0.0
    for _ in range(rounds):
        count, started = 0, time.perf_counter()
        while True:
            fn()
            count += 1
            elapsed = time.perf_counter() - started
            if elapsed >= seconds:
                break
        best = max(best, count / elapsed)
    return best


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    """Median seconds of ``repeat`` calls."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


_HTTP_CLIENT = r"""
import http.client, json, sys, time
host, port, path, headers, body, status, seconds, key_prefix, repeat_key = json.loads(sys.stdin.read())
connection = http.client.HTTPConnection(host, port)
body = body.encode()
calls, started = 0, time.perf_counter()
while True:
    if key_prefix:  # a fresh Idempotency-Key per request, or the same one (a replay)
        headers["Idempotency-Key"] = key_prefix if repeat_key else f"{key_prefix}-{calls}"
    connection.request("POST", path, body, headers)
    response = connection.getresponse()
    answer = response.read()
    assert response.status == status, answer[:300]
    calls += 1
    elapsed = time.perf_counter() - started
    if elapsed >= seconds:
        break
print(calls / elapsed)
"""


def http_post_rate(base_url: str, path: str, payload: dict, headers: dict, status: int, *,
                   seconds: float = 2.0, rounds: int = 3, key_prefix: str = "",
                   repeat_key: bool = False, clients: int = 1) -> float:
    """Best POSTs per second over ``rounds`` rounds, sent one after another on one
    keep-alive connection by a separate process (http.client): a real client is never in
    the server's process, where it would take the server's CPU and its GIL. ``key_prefix``:
    send an Idempotency-Key, fresh per request (or always the same with ``repeat_key``).
    ``clients``: that many such processes at once (keys apart), their rates summed."""
    import json
    import subprocess
    import sys
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    jobs = [json.dumps([url.hostname, url.port, path,
                        {"Content-Type": "application/json", **headers}, json.dumps(payload),
                        status, seconds, f"{key_prefix}-c{n}" if key_prefix and not repeat_key
                        else key_prefix, repeat_key]) for n in range(clients)]
    best = 0.0
    for _ in range(rounds):
        procs = [subprocess.Popen([sys.executable, "-c", _HTTP_CLIENT], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in jobs]
        for proc, job in zip(procs, jobs):  # every client has its job before any reads
            proc.stdin.write(job)
            proc.stdin.close()
        total = 0.0
        for proc in procs:
            out, err = proc.stdout.read(), proc.stderr.read()
            if proc.wait():
                raise subprocess.CalledProcessError(proc.returncode, "http client", out, err)
            total += float(out.strip())
        best = max(best, total)
    return best


def row(name: str, ours: str, baseline: str, ratio: float, aim: str) -> str:
    return f"| {name} | {ours} | {baseline} | {ratio:.2f} | {aim} |"


TABLE_HEAD = "| measure | ours | baseline | ratio | aim |\n|---|---|---|---|---|"
