"""SMTP gateway throughput: messages accepted per second over STARTTLS + AUTH PLAIN, 20
parallel connections, 10 KB messages, each connection sending message after message.

Ours: the gateway (handler -> submission service: From authorization, MIME checks, one
submission + one message row per recipient, committed before the 250). Baseline, same run:
a bare aiosmtpd server with the same TLS context and AUTH settings whose handler only answers
250. Aims: at least half the bare server's rate; for inbound mail to an accept route
(unauthenticated, stored before the 250), at least 0.3 of it.

The load generator runs in a separate process (20 threads, smtplib), so client and servers do
not share a GIL.

``--processes N`` (N > 1) adds a second comparison: N gateway processes on one port
(``Gateway(reuse_port=True)``: SO_REUSEPORT, the kernel spreads the connections) against N
bare aiosmtpd processes on another port the same way, and also against the single bare
process measured first, so both fair comparisons are printed. All those servers are child
processes of this bench, started before the timed runs.

Run: .venv/bin/python bench/bench_smtp.py [--seconds 5] [--connections 20] [--processes 2]
     (BENCH_DATABASE_URL picks the database; its public schema is dropped and re-created)"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import smtplib
import ssl
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import (  # noqa: E402
    STACK_ENV,
    TABLE_HEAD,
    bench_database_url,
    prepare_database,
    row,
    start_stack,
)
MESSAGE_BYTES = 10 * 1024


def message(sender: str, to: str, n: int) -> bytes:
    head = (f"From: Bench <{sender}>\r\nTo: {to}\r\nSubject: Bench {n}\r\n"
            f"Date: Mon, 01 Jan 2024 00:00:00 +0000\r\nMessage-ID: <b{n}.{os.getpid()}@bench>\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n")
    line = "The quick brown fox jumps over the lazy dog, again and again and again.\r\n"
    body = line * ((MESSAGE_BYTES - len(head)) // len(line) + 1)
    return (head + body)[:MESSAGE_BYTES].rsplit("\r\n", 1)[0].encode() + b"\r\n"


def client(host: str, port: int, password: str, sender: str, to: str, seconds: float,
           connections: int, tls: bool) -> None:
    """The load generator (``--client``): prints '<accepted> <seconds>'."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    counts = [0] * connections
    errors: list[str] = []
    deadline = time.perf_counter() + seconds

    def run(i: int) -> None:
        try:
            with smtplib.SMTP(host, port, timeout=60) as smtp:
                smtp.ehlo("bench.test")
                if tls:
                    smtp.starttls(context=context)
                    smtp.ehlo("bench.test")
                if password:
                    smtp.login("bench", password)
                n = 0
                while time.perf_counter() < deadline:
                    smtp.sendmail(sender, [to], message(sender, to, i * 1_000_000 + n))
                    n += 1
                    counts[i] += 1
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{type(exc).__name__}: {exc}")

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        print("errors:", errors[:3], file=sys.stderr)
    print(sum(counts), elapsed)


def load(port: int, password: str, sender: str, to: str, seconds: float, connections: int,
         tls: bool = True, record: list | None = None) -> float:
    """Messages accepted per second; ``record`` gets (messages accepted, this process's CPU
    seconds per accepted message) appended (the in-process servers: the load generator is
    another process)."""
    before = os.times()
    out = subprocess.run([sys.executable, __file__, "--client", str(port), password, sender, to,
                          str(seconds), str(connections), "1" if tls else "0"],
                         capture_output=True, text=True, check=True)
    if out.stderr.strip():
        print(out.stderr.strip(), file=sys.stderr)
    accepted, elapsed = out.stdout.split()
    after = os.times()
    if record is not None:
        record.append((int(accepted), (after.user + after.system - before.user - before.system)
                       / max(int(accepted), 1)))
    return int(accepted) / float(elapsed)


class Sink:
    """The bare server's handler: every message answered 250, nothing stored."""

    async def handle_DATA(self, server, session, envelope):
        return "250 OK"


def bare_authenticator(password: str):
    from aiosmtpd.smtp import AuthResult

    def authenticator(server, session, envelope, mechanism, auth_data):
        return AuthResult(success=auth_data.password.decode() == password)
    return authenticator


def bare_server(context: ssl.SSLContext, password: str):
    """aiosmtpd with the same TLS and AUTH settings, answering 250 to everything."""
    from aiosmtpd.controller import Controller

    from tests.support import free_port

    controller = Controller(Sink(), hostname="127.0.0.1", port=free_port(), tls_context=context,
                            auth_require_tls=True, authenticator=bare_authenticator(password),
                            enable_SMTPUTF8=True)
    controller.start()
    return controller


def serve(kind: str, port: int, password: str) -> None:
    """A child server process (``--serve gateway|bare PORT PASSWORD``) bound with SO_REUSEPORT:
    prints "ready", serves until its stdin closes, then prints the transactions and statements
    its gateway committed and sent."""
    import logging

    logging.disable(logging.WARNING)
    from chalicelib.config import get_settings
    from chalicelib.smtp import tls

    if kind == "gateway":
        from bench.common import NullPort
        from chalicelib import queues
        from chalicelib.smtp.gateway import Gateway

        queues.set_port(NullPort())  # as start_stack: wake-ups dropped, no worker competes
        gateway = Gateway("127.0.0.1", port, submission_ports=[], tls_port=None,
                          reuse_port=True)
        gateway.start()
        work: dict = {}
        with database_work(work):
            print("ready", flush=True)
            sys.stdin.read()
        print(work["commits"], work["statements"], flush=True)
        return
    else:
        import asyncio

        from aiosmtpd.smtp import SMTP

        context = tls.server_context(get_settings())
        authenticator = bare_authenticator(password)
        loop = asyncio.new_event_loop()
        loop.run_until_complete(loop.create_server(
            lambda: SMTP(Sink(), hostname="127.0.0.1", tls_context=context,
                         auth_require_tls=True, authenticator=authenticator,
                         enable_SMTPUTF8=True),
            "127.0.0.1", port, reuse_port=True))
        threading.Thread(target=loop.run_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


@contextlib.contextmanager
def servers(kind: str, processes: int, password: str, work: dict | None = None):
    """``processes`` child servers of ``kind`` sharing one port; yields the port. ``work``
    gets the gateway children's transactions and statements added up when they stop."""
    from tests.support import free_port

    port = free_port()
    children = [subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port),
                                  password], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True) for _ in range(processes)]
    try:
        for child in children:
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{kind} server process did not start")
        yield port
    finally:
        for child in children:
            child.stdin.close()
        for child in children:
            if work is not None:
                for name, count in zip(("commits", "statements"),
                                       child.stdout.readline().split()):
                    work[name] = work.get(name, 0) + int(count)
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()


@contextlib.contextmanager
def database_work(counts: dict):
    """Counts the transactions committed and the statements sent by this process (the
    in-process gateway) while the block runs, through SQLAlchemy's engine events."""
    from sqlalchemy import event

    from chalicelib.db.engine import get_engine

    engine = get_engine()

    def committed(conn):
        counts["commits"] += 1

    def executed(conn, cursor, statement, parameters, context, executemany):
        counts["statements"] += 1

    counts.update(commits=0, statements=0)
    event.listen(engine, "commit", committed)
    event.listen(engine, "before_cursor_execute", executed)
    try:
        yield
    finally:
        event.remove(engine, "commit", committed)
        event.remove(engine, "before_cursor_execute", executed)


@contextlib.contextmanager
def profiled(path: str | None):
    """py-spy (sampling, other process) on this process while the block runs."""
    if not path:
        yield
        return
    # --gil: only samples holding the GIL (CPU in Python); --nonblocking: never pause us.
    spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record",
                            "--pid", str(os.getpid()), "--format", "raw", "--gil",
                            "--nonblocking", "--rate", "200", "-o", path],
                           stdout=subprocess.DEVNULL)
    time.sleep(1.0)  # let py-spy attach
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=20)
    ap.add_argument("--profile", metavar="FILE", help="py-spy the gateway during the submission "
                    "run and write collapsed stacks (py-spy --format raw) to FILE")
    ap.add_argument("--profile-inbound", metavar="FILE", help="the same for the inbound run")
    ap.add_argument("--processes", type=int, default=1, help="also measure N gateway processes "
                    "on one port (SO_REUSEPORT) against N bare aiosmtpd processes and against 1")
    args = ap.parse_args()

    url = bench_database_url()
    prepare_database(url, **STACK_ENV)

    import logging

    logging.disable(logging.WARNING)
    from chalicelib.config import get_settings
    from chalicelib.smtp import tls
    from tests.support import Api

    stack, api, tenant = start_stack()
    bare = bare_server(tls.server_context(get_settings()), "bench-password")
    try:
        Api.data(api.post(tenant.server_path + "/routes",
                          {"name": "in", "domain": tenant.domain, "mode": "accept"}), 201)
        sender, to = f"app@{tenant.domain}", "user@recipient.example"
        common = dict(seconds=args.seconds, connections=args.connections)
        bare_runs, ours_runs = [], []
        bare_rate = load(bare.port, "bench-password", sender, to, record=bare_runs, **common)
        work: dict = {}
        with profiled(args.profile), database_work(work):
            ours = load(stack.smtp_port, tenant.smtp_key, sender, to, record=ours_runs, **common)
        with profiled(args.profile_inbound):
            inbound = load(stack.smtp_port, "", "x@sender.example", f"in@{tenant.domain}",
                           **common)
        bare_again = load(bare.port, "bench-password", sender, to, record=bare_runs,
                          **common)
        if args.processes > 1:
            work_n: dict = {}
            ours_n_runs: list = []
            with servers("bare", args.processes, "bench-password") as bare_port, \
                    servers("gateway", args.processes, "", work_n) as gateway_port:
                bare_n = [load(bare_port, "bench-password", sender, to, **common)]
                ours_n = load(gateway_port, tenant.smtp_key, sender, to, record=ours_n_runs,
                              **common)
                bare_n.append(load(bare_port, "bench-password", sender, to, **common))
    finally:
        bare.stop()
        stack.stop()
    baseline = max(bare_rate, bare_again)
    print(f"SMTP gateway, {args.connections} connections, STARTTLS + AUTH, 10 KB messages, "
          f"{args.seconds:.0f} s each ({url.split('://')[0]})")
    print(TABLE_HEAD)
    print(row("submission accepted/s", f"{ours:.0f}", f"{baseline:.0f} bare aiosmtpd",
              ours / baseline, ">= 0.5"))
    [(accepted, ours_cpu)], bare_cpu = ours_runs, min(cpu for _, cpu in bare_runs)
    print(row("gateway process CPU ms per submission (lower is better)",
              f"{1000 * ours_cpu:.2f}", f"{1000 * bare_cpu:.2f} bare aiosmtpd",
              bare_cpu / ours_cpu, "-"))
    print(f"| submission transactions / statements per message | "
          f"{work['commits'] / accepted:.2f} / {work['statements'] / accepted:.2f} | - | - | - |")
    print(row("inbound (accept route) accepted/s, no AUTH", f"{inbound:.0f}",
              f"{baseline:.0f} bare aiosmtpd", inbound / baseline, ">= 0.3"))
    if args.processes > 1:
        n = args.processes
        print(row(f"submission accepted/s, {n} gateway processes", f"{ours_n:.0f}",
                  f"{max(bare_n):.0f} bare aiosmtpd, {n} processes", ours_n / max(bare_n),
                  ">= 0.5"))
        print(row(f"submission accepted/s, {n} gateway processes", f"{ours_n:.0f}",
                  f"{baseline:.0f} bare aiosmtpd, 1 process", ours_n / baseline, ">= 0.5"))
        accepted_n = max(ours_n_runs[0][0], 1)
        print(f"| submission transactions / statements per message, {n} gateway processes | "
              f"{work_n.get('commits', 0) / accepted_n:.2f} / "
              f"{work_n.get('statements', 0) / accepted_n:.2f} | - | - | - |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "--client":
        _, _, port, password, sender, to, seconds, connections, use_tls = sys.argv
        client("127.0.0.1", int(port), password, sender, to, float(seconds), int(connections),
               use_tls == "1")
    else:
        main()
