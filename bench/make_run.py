"""What ``make run`` starts, for benches that measure it from outside: ``python -m
chalicelib.local`` as a subprocess (in a session of its own, so Ctrl-C is a SIGINT to its
process group, as a terminal sends it), and the CPU of its whole process tree read from
/proc.

CPU of a tree: for every live process of the tree, utime + stime + cutime + cstime from
/proc/<pid>/stat. cutime/cstime hold the CPU of children the process has reaped, so a worker
that exits (and is reaped by its supervisor) between two readings still counts, once: its
own entry is gone and its CPU is in its parent's. Only processes reparented out of the tree
(orphans) would be lost; the supervisor reaps its children."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

#: The tree whose stack is started: this checkout, or BENCH_STACK_ROOT (another tree, e.g. a
#: `git archive` of main, to measure before against after in one run of the same bench).
ROOT = os.environ.get("BENCH_STACK_ROOT") or \
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")
#: The process counts the supervisor reads (a stack that ignores them runs one process).
PROCESS_KNOBS = ("WORKER_PROCESSES", "HTTP_PROCESSES", "SMTP_PROCESSES")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its last ')'.
    return raw[raw.rindex(")") + 2:].split()


def tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by ``root``'s tree, reaped children included."""
    user, system = tree_cpu_split(root)
    return user + system


def tree_cpu_split(root: int) -> tuple[float, float]:
    """(user, system) CPU seconds used so far by ``root``'s tree, reaped children included:
    system time is the kernel's work for it (syscalls, sockets, thread wake-ups)."""
    user = system = 0
    for pid in tree(root):
        fields = _stat(pid)
        if fields is not None:  # fields 14-17 of stat: utime stime cutime cstime
            user += int(fields[11]) + int(fields[13])
            system += int(fields[12]) + int(fields[14])
    return user / TICKS, system / TICKS


def describe(root: int) -> str:
    """The tree as ``N processes: <cmdline>; ...`` (what was measured)."""
    shown = []
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        line = " ".join(os.path.basename(w) if i == 0 else w for i, w in enumerate(words))
        shown.append(line if len(line) <= 70 else line[:67] + "...")
    counted: dict[str, int] = {}
    for line in shown:
        counted[line] = counted.get(line, 0) + 1
    parts = [f"{n} x {line}" if n > 1 else line for line, n in counted.items()]
    return f"{len(shown)} process{'es' if len(shown) != 1 else ''}: " + "; ".join(parts)


class MakeRun:
    """``python -m chalicelib.local`` with the caller's environment plus ``env`` (a value of
    None removes the variable); ``start()`` returns once GET /health answers."""

    def __init__(self, env: dict[str, str | None]):
        from tests.support import free_port

        self.http_port, self.smtp_port = free_port(), free_port()
        self.env = dict(os.environ, PORT=str(self.http_port), SMTP_PORT=str(self.smtp_port))
        for name, value in env.items():
            if value is None:
                self.env.pop(name, None)
            else:
                self.env[name] = value
        self.proc: subprocess.Popen | None = None
        self.base_url = f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 120) -> "MakeRun":
        import requests

        # Its output goes to a file: a pipe nobody reads would block the stack when full.
        # BENCH_STACK_LOG=FILE keeps the stack's output (a temporary file otherwise)
        kept = os.environ.get("BENCH_STACK_LOG")
        self.log = open(kept, "w+b") if kept else tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "chalicelib.local"], cwd=ROOT,
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the stack exited ({self.proc.returncode}): "
                                   f"{self.output()[-2000:]}")
            try:
                if requests.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the stack did not answer /health")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 60) -> str:
        """Ctrl-C (SIGINT to the process group), then wait; SIGKILL to the group after
        ``timeout``. Returns what the stack printed."""
        if self.proc is None:
            return ""
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        return self.output()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")
