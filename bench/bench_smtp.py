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
     [--rounds 3] [--runs]
     (BENCH_DATABASE_URL picks the database; its public schema is dropped and re-created)"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import smtplib
import statistics
import ssl
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.make_run import tree_cpu  # noqa: E402
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
    """Messages accepted per second; ``record`` gets (messages accepted, the servers' CPU
    seconds per accepted message) appended: this process (the in-process servers) and its
    ``--serve`` children, not the load generator."""
    before, tree_before = os.times(), tree_cpu(os.getpid())
    machine_before, pg_before = machine_cpu(), postgres_cpu()
    out = subprocess.run([sys.executable, __file__, "--client", str(port), password, sender, to,
                          str(seconds), str(connections), "1" if tls else "0"],
                         capture_output=True, text=True, check=True)
    if out.stderr.strip():
        print(out.stderr.strip(), file=sys.stderr)
    accepted, elapsed = out.stdout.split()
    after, tree_after = os.times(), tree_cpu(os.getpid())
    machine_after, pg_after = machine_cpu(), postgres_cpu()
    count = max(int(accepted), 1)
    busy, total = (a - b for a, b in zip(machine_after, machine_before))
    # The load generator is the child reaped meanwhile; the servers are this process and
    # the --serve children, if any.
    client_cpu = (after.children_user + after.children_system - before.children_user
                  - before.children_system)
    if record is not None:
        record.append((int(accepted), (tree_after - tree_before - client_cpu) / count))
    if LOG_RUNS:
        print(f"  run on port {port}: {int(accepted) / float(elapsed):.0f}/s, client "
              f"{1000 * client_cpu / count:.2f} CPU-ms a message, PostgreSQL "
              f"{1000 * (pg_after - pg_before) / count:.2f}, machine "
              f"{busy / total:.0%} busy", file=sys.stderr)
    return int(accepted) / float(elapsed)


#: ``--runs``: print each run's rate, the load generator's CPU per message and how busy the
#: machine's cores were (a run whose cores are all busy is bound by CPU, not by waiting).
LOG_RUNS = False


def postgres_cpu() -> float:
    """CPU seconds of this machine's live PostgreSQL processes (0 where /proc is missing)."""
    ticks = 0
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
        if name.startswith("postgres"):
            fields = rest.split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies over all cores, from /proc/stat ((0, 1) elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return 0, 1
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


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
    prints "ready" and serves until its stdin closes."""
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
        wait_committer(gateway)
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
def servers(kind: str, processes: int, password: str):
    """``processes`` child servers of ``kind`` sharing one port; yields the port."""
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
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()


def wait_committer(gateway) -> None:
    """Until the gateway's committer process answers (SMTP_COMMIT_PROCESS): before that, mail
    is committed in the gateway's own process."""
    wait = getattr(gateway._committer, "wait_ready", None)
    if wait is not None and not wait(60):
        raise RuntimeError("the gateway's committer process did not start")


@contextlib.contextmanager
def database_work(url: str, counts: dict):
    """Counts the transactions committed in the bench's database while the block runs
    (``pg_stat_database.xact_commit``: the gateway's processes and its committer's alike),
    read as bench_pipeline reads them (``settle_stats``: after each backend reported)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from bench.bench_pipeline import settle_stats

    engine = create_engine(url, poolclass=NullPool)
    try:
        before, _ = settle_stats(engine)
        yield
        after, _ = settle_stats(engine)
        counts["commits"] = after - before
    finally:
        engine.dispose()


@contextlib.contextmanager
def profiled(path: str | None, committer_pid: int | None = None):
    """py-spy (sampling, other process) on this process while the block runs, and on the
    gateway's committer process (SMTP_COMMIT_PROCESS) into ``path + ".commit"``."""
    if not path:
        yield
        return
    targets = [(os.getpid(), path)]
    if committer_pid is not None:
        targets.append((committer_pid, path + ".commit"))
    # --gil: only samples holding the GIL (CPU in Python); --nonblocking: never pause us.
    spies = [subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"),
                               "record", "--pid", str(pid), "--format", "raw", "--gil",
                               "--nonblocking", "--rate", "200", "-o", out],
                              stdout=subprocess.DEVNULL) for pid, out in targets]
    time.sleep(1.0)  # let py-spy attach
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
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
    ap.add_argument("--rounds", type=int, default=1, help="measure the bare server and the "
                    "gateway this many times, alternating")
    ap.add_argument("--runs", action="store_true", help="print each run's rate, the load "
                    "generator's CPU per message and how busy the machine was")
    args = ap.parse_args()
    global LOG_RUNS
    LOG_RUNS = args.runs

    url = bench_database_url()
    prepare_database(url, **STACK_ENV)

    import logging

    logging.disable(logging.WARNING)
    from chalicelib.config import get_settings
    from chalicelib.smtp import tls
    from tests.support import Api

    stack, api, tenant = start_stack()
    wait_committer(stack.gateway)
    bare = bare_server(tls.server_context(get_settings()), "bench-password")
    try:
        Api.data(api.post(tenant.server_path + "/routes",
                          {"name": "in", "domain": tenant.domain, "mode": "accept"}), 201)
        sender, to = f"app@{tenant.domain}", "user@recipient.example"
        common = dict(seconds=args.seconds, connections=args.connections)
        # Untimed warm-up of both servers (first imports, compiled statements, pools).
        load(bare.port, "bench-password", sender, to, seconds=1, connections=args.connections)
        load(stack.smtp_port, tenant.smtp_key, sender, to, seconds=1,
             connections=args.connections)
        rounds = []
        for _ in range(args.rounds):
            bare_runs, ours_runs, work = [], [], {}
            bare_rate = load(bare.port, "bench-password", sender, to, record=bare_runs,
                             **common)
            committer_pid = getattr(stack.gateway._committer, "pid", None)
            with profiled(args.profile, committer_pid), database_work(url, work):
                ours = load(stack.smtp_port, tenant.smtp_key, sender, to, record=ours_runs,
                            **common)
            with profiled(args.profile_inbound, committer_pid):
                inbound = load(stack.smtp_port, "", "x@sender.example", f"in@{tenant.domain}",
                               **common)
            bare_again = load(bare.port, "bench-password", sender, to, record=bare_runs,
                              **common)
            rounds.append((ours, inbound, max(bare_rate, bare_again), ours_runs[0],
                           min(cpu for _, cpu in bare_runs), work["commits"]))
        if args.processes > 1:
            ours_n_runs: list = []
            work_n: dict = {}
            with servers("bare", args.processes, "bench-password") as bare_port, \
                    servers("gateway", args.processes, "") as gateway_port:
                load(gateway_port, tenant.smtp_key, sender, to, seconds=1,
                     connections=args.connections)
                bare_n = [load(bare_port, "bench-password", sender, to, **common)]
                with database_work(url, work_n):
                    ours_n = load(gateway_port, tenant.smtp_key, sender, to,
                                  record=ours_n_runs, **common)
                bare_n.append(load(bare_port, "bench-password", sender, to, **common))
    finally:
        bare.stop()
        stack.stop()
    print(f"SMTP gateway, {args.connections} connections, STARTTLS + AUTH, 10 KB messages, "
          f"{args.seconds:.0f} s each, {args.rounds} round(s) ({url.split('://')[0]}; "
          f"SMTP_COMMIT_PROCESS={getattr(get_settings(), 'smtp_commit_process', '-')})")
    print(TABLE_HEAD)
    for index, (ours, inbound, baseline, (accepted, ours_cpu), bare_cpu, commits) \
            in enumerate(rounds, 1):
        label = f" (round {index})" if len(rounds) > 1 else ""
        print(row(f"submission accepted/s{label}", f"{ours:.0f}",
                  f"{baseline:.0f} bare aiosmtpd", ours / baseline, ">= 0.5"))
        print(row(f"gateway CPU ms per submission, committer process included{label} "
                  "(lower is better)", f"{1000 * ours_cpu:.2f}",
                  f"{1000 * bare_cpu:.2f} bare aiosmtpd", bare_cpu / ours_cpu, "-"))
        print(f"| submission transactions per message{label} | {commits / accepted:.2f} | - | "
              "- | - |")
        print(row(f"inbound (accept route) accepted/s, no AUTH{label}", f"{inbound:.0f}",
                  f"{baseline:.0f} bare aiosmtpd", inbound / baseline, ">= 0.3"))
    if len(rounds) > 1:
        ratios = sorted(ours / baseline for ours, _, baseline, *_ in rounds)
        print(f"| submission ratio over {len(rounds)} rounds: median / lowest / highest | "
              f"{statistics.median(ratios):.2f} / {ratios[0]:.2f} / {ratios[-1]:.2f} | - | - "
              "| >= 0.5 |")
    if args.processes > 1:
        n = args.processes
        baseline = max(r[2] for r in rounds)
        bare_cpu = min(r[4] for r in rounds)
        print(row(f"submission accepted/s, {n} gateway processes", f"{ours_n:.0f}",
                  f"{max(bare_n):.0f} bare aiosmtpd, {n} processes", ours_n / max(bare_n),
                  ">= 0.5"))
        print(row(f"submission accepted/s, {n} gateway processes", f"{ours_n:.0f}",
                  f"{baseline:.0f} bare aiosmtpd, 1 process", ours_n / baseline, ">= 0.5"))
        accepted_n = max(ours_n_runs[0][0], 1)
        print(row(f"gateway CPU ms per submission, {n} processes (lower is better)",
                  f"{1000 * ours_n_runs[0][1]:.2f}", f"{1000 * bare_cpu:.2f} bare aiosmtpd, "
                  "1 process", bare_cpu / ours_n_runs[0][1], "-"))
        print(f"| submission transactions per message, {n} gateway processes | "
              f"{work_n['commits'] / accepted_n:.2f} | - | - | - |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "--client":
        _, _, port, password, sender, to, seconds, connections, use_tls = sys.argv
        client("127.0.0.1", int(port), password, sender, to, float(seconds), int(connections),
               use_tls == "1")
    else:
        main()
