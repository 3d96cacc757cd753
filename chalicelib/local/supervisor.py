"""`make run` on every core: the supervisor process prepares the stack once (migrations,
keys: stack.prepare), holds the shared queue (broker.py) and the one sweeper, and runs the
HTTP API, the SMTP gateway and the queue workers as child processes (child.py), each a fresh
interpreter. A child that dies is logged (exit code or signal) and started again; one that
keeps dying at once is started again after a growing pause (0.5 s doubling to 30 s), not in
a tight loop. ``stop`` (Ctrl-C, SIGTERM) asks every child to stop, and kills what is left
after a grace period.

Ports: the supervisor binds each shared port itself with SO_REUSEPORT and keeps that socket
(bound, never listening: the kernel hands connections only to listening sockets), so port 0
becomes a real port every child then binds, and a restarted child finds it still free."""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from chalicelib import observability, queues
from chalicelib.config import Settings, local_url
from chalicelib.local.broker import BROKER_ENV, Broker, Tally
from chalicelib.local.stack import Housekeeping, prepare

log = logging.getLogger(__name__)

FIRST_PAUSE, LONGEST_PAUSE = 0.5, 30.0
# A child that lived this long before dying is restarted at once, its pause reset.
STEADY_SECONDS = 10.0
STOP_GRACE_SECONDS = 15.0
READY_SECONDS = 60.0


@dataclass
class Child:
    kind: str
    index: int
    env: dict
    process: subprocess.Popen | None = None
    started: float = 0.0
    pause: float = 0.0
    restart_at: float | None = None
    restarts: int = 0
    history: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.kind} {self.index}"

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "chalicelib.local.child",
                                         self.kind], env=self.env)
        self.started = time.monotonic()
        self.restart_at = None
        log.info("started %s (pid %d)", self.name, self.process.pid)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def wait_listening(host: str, port: int, timeout: float) -> bool:
    """Until a connection to ``port`` is accepted (a child listens), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    log.warning("nothing listens on %s:%d after %.0f s", host, port, timeout)
    return False


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, non-listening SO_REUSEPORT socket holding ``port`` (0: a free one)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class Supervisor:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.notes: list[str] = []
        self.children: list[Child] = []
        self.schedule = queues.Schedule()
        self.broker: Broker | None = None
        self.local_port: queues.LocalPort | None = None
        self.housekeeping = Housekeeping(settings)
        self._reserved: list[socket.socket] = []
        self.http_port = settings.port
        self.smtp_port = settings.smtp_port

    @property
    def base_url(self) -> str:
        return local_url(self.settings.host, self.http_port)

    def start(self) -> "Supervisor":
        settings = self.settings
        self.notes = prepare(settings)
        http, smtp = reserve_port(settings.host, settings.port), \
            reserve_port(settings.host, settings.smtp_port)
        self._reserved = [http, smtp]
        self.http_port, self.smtp_port = http.getsockname()[1], smtp.getsockname()[1]
        tally = Tally()
        observability.share_counters(tally.add)  # this process's counts too (the sweeper's)
        self.broker = Broker(self.schedule, tally).start()
        env = {**os.environ, BROKER_ENV: self.broker.address, "PORT": str(self.http_port),
               "SMTP_PORT": str(self.smtp_port)}
        if self.http_port != settings.port and not settings.public_url:
            env["PUBLIC_URL"] = self.base_url  # port 0: links name the real port
        # Every enqueue of this process (the sweeper's) goes to the shared schedule; with
        # WORKER_PROCESSES=0 this process's threads also work it.
        self.local_port = queues.LocalPort(settings.worker_threads, self.schedule)
        queues.set_port(self.local_port)
        if settings.worker_processes == 0:
            from chalicelib.workers import dispatch
            from chalicelib.workers.registry import load_workers

            load_workers()
            self.local_port.start(dispatch.dispatch, dispatch.dispatch_batch)
        counts = {"http": settings.http_processes, "smtp": settings.smtp_processes,
                  "worker": settings.worker_processes}
        for kind, count in counts.items():
            for index in range(1, count + 1):
                child_env = env
                if kind == "smtp" and index > 1:
                    child_env = {**env, "OUTBOUND_RELAY_PORT": "0"}  # one relay listener
                self.children.append(Child(kind, index, child_env))
        for child in self.children:
            child.start()
        # The banner follows: the addresses it prints answer by then.
        for port in (self.http_port, self.smtp_port):
            wait_listening(settings.host, port, READY_SECONDS)
        self.housekeeping.start()
        return self

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for child in self.children:
            found[child.kind] = found.get(child.kind, 0) + 1
        return found

    def check(self) -> None:
        """Restart what died (called every fraction of a second by ``run``)."""
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.start()
                continue
            code = child.process.poll()
            if code is None:
                continue
            lived = now - child.started
            child.pause = 0.0 if lived >= STEADY_SECONDS else \
                min(LONGEST_PAUSE, max(FIRST_PAUSE, child.pause * 2))
            child.restarts += 1
            child.history.append(code)
            child.restart_at = now + child.pause
            log.warning("%s (pid %d) %s after %.1f s; restarting it in %.1f s (restart %d)",
                        child.name, child.process.pid, describe_exit(code), lived, child.pause,
                        child.restarts)

    def run(self, stopped) -> None:
        """Supervise until ``stopped`` (a signals.StopRequest) is set."""
        while not stopped.wait(0.2):
            self.check()
            observability.push_counts()

    def stop(self) -> None:
        running = [c for c in self.children if c.process and c.process.poll() is None]
        for child in running:
            child.process.terminate()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in running:
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) did not stop in %.0f s; killing it", child.name,
                            child.process.pid, STOP_GRACE_SECONDS)
                child.process.kill()
                child.process.wait()
        self.housekeeping.stop()
        if self.local_port is not None:  # started: the process-wide ports are ours to reset
            self.local_port.stop()
            queues.set_port(None)
            observability.share_counters(None)
        if self.broker is not None:
            self.broker.stop()
        for sock in self._reserved:
            sock.close()
