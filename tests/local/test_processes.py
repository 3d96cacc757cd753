"""`make run` on several processes (chalicelib/local/supervisor.py): the real
``python -m chalicelib.local`` with worker processes delivering through the shared queue to a
real MX and reporting to a real webhook receiver; a worker killed with SIGKILL mid-run is
restarted and logged, and costs nothing (no message sent twice, none lost); SIGINT stops
every child. The stack runs on a database of its own, so the suite's in-process stack (its
sweeper and workers) cannot take its rows."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from email import message_from_bytes

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import TEST_ADMIN_KEY, TEST_DATABASE_URL, app_database_url
from tests.mx import ScriptedMX
from tests.receivers import Receiver
from tests.support import Api, make_tenant, unique, wait_for
from tests.webhooks.helpers import create_webhook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTED = re.compile(r"started (\w+) (\d+) \(pid (\d+)\)")


@contextmanager
def own_database(tmp_path, sqlite: bool):
    """(owner URL, service URL) of an empty database for the stack under test: a SQLite
    file, or a PostgreSQL database beside the suite's."""
    if sqlite or not TEST_DATABASE_URL.startswith("postgresql"):
        url = f"sqlite:///{tmp_path}/procs.db"
        yield url, url
        return
    parsed = make_url(TEST_DATABASE_URL)
    name = f"{parsed.database}_procs"
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    owner = parsed.set(database=name).render_as_string(hide_password=False)
    try:
        yield owner, app_database_url(owner)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Stack:
    """``python -m chalicelib.local`` as a subprocess; its output (banner and log lines of
    the supervisor and every child) is collected in ``lines``."""

    def __init__(self, tmp_path, owner_url: str, service_url: str, **env: str):
        self.owner_url = owner_url
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chalicelib.local"], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "DATABASE_URL": service_url,
                 "DATABASE_OWNER_URL": owner_url if owner_url != service_url else "",
                 "SIGNING_KEY_PATH": str(tmp_path / "signing.pem"), "CAPTURE_DIR": "",
                 "ADMIN_API_KEY": TEST_ADMIN_KEY, "HOST": "127.0.0.1", "PORT": "0",
                 "SMTP_PORT": "0", "SMTP_TLS_PORT": "0", "LOG_LEVEL": "INFO",
                 "WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true", "TIME_SCALE": "0.0001",
                 # A dead worker's claims expire soon, and the sweeper looks often.
                 "CLAIM_TIMEOUT_SECONDS": "5", "SWEEP_INTERVAL_SECONDS": "0.5",
                 "SWEEP_REWAKE_SECONDS": "2", **env})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        api_line = wait_for(lambda: next((x for x in self.lines if x.startswith("HTTP API")),
                                         None), 60, message="the banner")
        self.base_url = re.search(r"http://\S+?(?=/api/v2)", api_line).group(0)
        self.api = Api(self.base_url, TEST_ADMIN_KEY)
        wait_for(self._healthy, 60, 0.2, message="the HTTP API")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _healthy(self) -> bool:
        try:
            return self.api.get("/health").status_code == 200
        except OSError:
            return False

    def children(self) -> dict[tuple[str, int], list[int]]:
        """Every process started, by (kind, index): its pids in order (restarts appended)."""
        found: dict[tuple[str, int], list[int]] = {}
        for line in list(self.lines):
            match = STARTED.search(line)
            if match:
                found.setdefault((match[1], int(match[2])), []).append(int(match[3]))
        return found

    def statuses(self) -> dict[int, str]:
        return {row[0]: row[1] for row in self.messages()}

    def messages(self) -> list[tuple]:
        """(id, status, Message-ID header) of every message, read as the tables' owner."""
        engine = create_engine(self.owner_url)
        try:
            with engine.connect() as conn:
                return list(conn.execute(text(
                    "SELECT id, status, message_id_header FROM messages")).all())
        finally:
            engine.dispose()

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read()
    except FileNotFoundError:
        return False


def _send(stack: Stack, tenant, count: int, per_request: int = 50) -> list[int]:
    ids = []
    for start in range(0, count, per_request):
        data = Api.data(stack.api.post("/api/v2/server/messages/batch", {"messages": [
            {"from": f"App <app@{tenant.domain}>", "to": [f"{unique('p')}@recipient.example"],
             "subject": f"m{start + i}", "text_body": "b"}
            for i in range(min(per_request, count - start))]}, server_key=tenant.api_key))
        ids += [m["data"]["recipients"][0]["id"] for m in data["messages"]]
    return ids


def _message_ids(mx: ScriptedMX) -> Counter:
    return Counter(message_from_bytes(m.data)["Message-ID"].strip("<> ")
                   for m in list(mx.messages))


def _sent_events(receiver: Receiver) -> Counter:
    return Counter(r.json()["payload"]["message"]["id"] for r in list(receiver.requests)
                   if r.json()["event"] == "MessageSent")


@contextmanager
def running(tmp_path, sqlite: bool = False, **env):
    mx, receiver = ScriptedMX().start(), Receiver().start()
    with own_database(tmp_path, sqlite) as (owner, service):
        stack = Stack(tmp_path, owner, service, DELIVERY_RELAY=mx.relay, **env)
        try:
            yield stack, mx, receiver
        finally:
            stack.kill()
            mx.stop()
            receiver.stop()


def _stops_every_child(stack: Stack) -> None:
    pids = [pid for started in stack.children().values() for pid in started]
    assert stack.interrupt() == 0, stack.lines[-20:]
    assert pids and not [pid for pid in pids if _alive(pid)], stack.lines[-20:]


@pytest.mark.postgres_only
def test_a_killed_worker_process_is_restarted_and_costs_no_message(tmp_path):
    with running(tmp_path, WORKER_PROCESSES="2", WORKER_THREADS="4") as (stack, mx, receiver):
        tenant = make_tenant(stack.api)
        create_webhook(stack.api, tenant, receiver.url)
        ids = _send(stack, tenant, 200)
        wait_for(lambda: len(mx.messages) >= 20, 60, message="deliveries under way")
        victim = stack.children()[("worker", 1)][0]
        os.kill(victim, signal.SIGKILL)
        # Every message ends Sent, or Held when the killed worker had already told the MX
        # DATA (its in-flight marker) but not yet recorded what the MX answered.
        wait_for(lambda: set((s := stack.statuses()).values()) <= {"Sent", "Held"}
                 and len(s) == len(ids), 120, 0.5, message="every message settled")
        statuses = stack.statuses()
        sent = [i for i in ids if statuses[i] == "Sent"]
        sent_headers = {header.strip("<> ") for _, status, header in stack.messages()
                        if status == "Sent"}
        wait_for(lambda: set(sent) <= set(_sent_events(receiver)), 60, 0.2,
                 message="a MessageSent webhook for every message sent")
        restarted = stack.children()[("worker", 1)]
        assert len(restarted) >= 2 and restarted[0] == victim
        assert any(f"worker 1 (pid {victim}) killed by SIGKILL" in line
                   for line in stack.lines), stack.lines[-20:]
        _stops_every_child(stack)
    at_mx = _message_ids(mx)
    assert max(at_mx.values()) == 1, [m for m, n in at_mx.items() if n > 1]  # none twice
    # None lost: at the MX once, or held (at most one per batch the dead worker was in).
    assert sent_headers <= set(at_mx)
    assert len(ids) - len(sent) <= 4, statuses  # WORKER_THREADS batches: one each at most


def test_worker_processes_deliver_on_sqlite_too(tmp_path):
    with running(tmp_path, sqlite=True, WORKER_PROCESSES="2") as (stack, mx, receiver):
        tenant = make_tenant(stack.api)
        create_webhook(stack.api, tenant, receiver.url)
        ids = _send(stack, tenant, 60, per_request=20)
        wait_for(lambda: len(mx.messages) >= len(ids), 120, 0.2, message="every delivery")
        wait_for(lambda: set(ids) <= set(_sent_events(receiver)), 60, 0.2,
                 message="a MessageSent webhook for every message")
        assert set(stack.statuses().values()) == {"Sent"}
        assert ("worker", 2) in stack.children()
        _stops_every_child(stack)
    assert sorted(_message_ids(mx).values()) == [1] * len(ids)

