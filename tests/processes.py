"""`python -m chalicelib.local` (what `make run` starts) as a subprocess on a database of its
own, with a real MX and webhook receiver: for tests/local/test_processes.py and
bench/bench_procs.py."""
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

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import TEST_ADMIN_KEY, TEST_DATABASE_URL, app_database_url
from tests.mx import ScriptedMX
from tests.receivers import Receiver
from tests.support import Api, unique, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTED = re.compile(r"started (\w+) (\d+) \(pid (\d+)\)")


@contextmanager
def own_database(tmp_path, sqlite: bool, beside: str = TEST_DATABASE_URL):
    """(owner URL, service URL) of an empty database for the stack under test: a SQLite
    file, or a PostgreSQL database beside ``beside`` (the suite's)."""
    if sqlite or not beside.startswith("postgresql"):
        url = f"sqlite:///{tmp_path}/procs.db"
        yield url, url
        return
    parsed = make_url(beside)
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
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "DATABASE_URL": service_url,
                 "DATABASE_OWNER_URL": owner_url if owner_url != service_url else "",
                 "SIGNING_KEY_PATH": str(tmp_path / "signing.pem"), "CAPTURE_DIR": "",
                 "ADMIN_API_KEY": TEST_ADMIN_KEY, "HOST": "127.0.0.1", "PORT": "0",
                 "SMTP_PORT": "0", "SMTP_TLS_PORT": "0", "LOG_LEVEL": "INFO",
                 "WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true", "TIME_SCALE": "0.0001",
                 # A dead worker's claims expire soon, and the sweeper looks often.
                 "CLAIM_TIMEOUT_SECONDS": "10", "SWEEP_INTERVAL_SECONDS": "0.5",
                 "SWEEP_REWAKE_SECONDS": "2", **env})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        api_line = wait_for(lambda: next((x for x in self.lines if x.startswith("HTTP API")),
                                         None), 60, message="the banner")
        self.base_url = re.search(r"http://\S+?(?=/api/v2)", api_line).group(0)
        smtp_line = next(x for x in self.lines if x.startswith("SMTP gateway"))
        self.smtp_port = int(smtp_line.rsplit(":", 1)[1])
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
        """Ctrl-C as a terminal sends it: SIGINT to the whole process group (the supervisor
        then also sends its children SIGTERM)."""
        os.killpg(self.proc.pid, signal.SIGINT)
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read()
    except FileNotFoundError:
        return False


def send_batches(stack: Stack, tenant, count: int, per_request: int = 50) -> list[int]:
    ids = []
    for start in range(0, count, per_request):
        data = Api.data(stack.api.post("/api/v2/server/messages/batch", {"messages": [
            {"from": f"App <app@{tenant.domain}>", "to": [f"{unique('p')}@recipient.example"],
             "subject": f"m{start + i}", "text_body": "b"}
            for i in range(min(per_request, count - start))]}, server_key=tenant.api_key))
        ids += [m["data"]["recipients"][0]["id"] for m in data["messages"]]
    return ids


def message_ids(mx: ScriptedMX) -> Counter:
    return Counter(message_from_bytes(m.data)["Message-ID"].strip("<> ")
                   for m in list(mx.messages))


def sent_events(receiver: Receiver) -> Counter:
    return Counter(r.json()["payload"]["message"]["id"] for r in list(receiver.requests)
                   if r.json()["event"] == "MessageSent")


@contextmanager
def running(tmp_path, sqlite: bool = False, beside: str = TEST_DATABASE_URL, **env):
    """(stack, mx, receiver): the stack delivering to the MX; stopped (killed) at the end."""
    mx, receiver = ScriptedMX().start(), Receiver().start()
    with own_database(tmp_path, sqlite, beside) as (owner, service):
        stack = Stack(tmp_path, owner, service, DELIVERY_RELAY=mx.relay, **env)
        try:
            yield stack, mx, receiver
        finally:
            stack.kill()
            mx.stop()
            receiver.stop()
