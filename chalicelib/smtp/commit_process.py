"""The gateway's group committer in a process of its own (SMTP_COMMIT_PROCESS, on by default).

Why: in one process the committer thread, which turns DATA into committed rows, shares one
GIL with the event loop that serves every connection. Each time the committer's database
answer arrives it waits for the loop to let go of the GIL (up to the 5 ms switch interval),
a batch takes ~12 ms where its own work is ~4, and the committer, busy 93% of the time, is
what caps the gateway (bench_smtp, "SMTP gateway, issue 26" in bench/RESULTS.md). In a child
process it has a GIL of its own: the loop only reads SMTP and hands each message over.

How:
* :class:`CommitterProcess` has the GroupCommitter's interface (``submit(unit) -> Future``,
  ``stop()``). Group units (submissions, inbound mail, DMARC reports: plain data) are
  pickled to the child over a socket pair, one length-prefixed frame each; anything else
  (the plain callables of mixed inbound mail) runs in this process's own committer, as do all
  units while the child is starting or restarting, so nothing waits for it.
* The child (``python -m chalicelib.smtp.commit_process FD``) runs a GroupCommitter and
  answers each unit with its result, a batch's answers in one frame. What the units did
  beyond their rows comes back with the answers and is done here, in the gateway's process:
  the queue wake-ups sent after the commit (to this process's queue port: SQS, `make run`'s
  broker or the in-process queue), the metric counts and the structured log lines (written
  to the gateway's log stream). A change of the environment (of the settings) is sent along
  before the next unit.
* A child that dies (killed, out of memory) fails the units it held: their clients get 451
  and send again; a unit whose batch had committed is then stored twice, as when the whole
  gateway dies between the commit and the 250 (SMTP's at-least-once). The child is started
  again (with a growing pause) and, meanwhile, units are committed in this process.
* The child keeps its statements prepared on its connections (db/engine.py,
  ``use_named_statements``): PostgreSQL plans each once, not at every batch.
* The child stops when its socket closes (the gateway's ``stop()``, or the gateway's death):
  it first answers what it holds. It ignores SIGINT and SIGTERM, which a terminal or
  `make run`'s supervisor sends to the whole process group, so that it is never stopped
  with answers still owed.
Pickle is used only between this process and the child it started, over an unnamed socket
pair: nothing else can write to it. A unit is handed over with a blocking send from the event
loop: the child reads continuously, so the send waits only when the child is behind by more
than the socket's buffer (~200 KB: a very large message while the child parses another).
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future

from chalicelib import errors, observability, queues
from chalicelib.smtp.commit import GroupCommitter, GroupUnit, settle

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Seconds between restarts of a child that keeps dying, doubling up to the last.
RESTART_PAUSES = (0.5, 1, 2, 5, 10, 30)


def _frame(message: object) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _frames(sock: socket.socket):
    """The messages read from ``sock`` until it closes."""
    stream = sock.makefile("rb", buffering=1 << 20)
    try:
        while True:
            head = stream.read(_HEADER.size)
            if len(head) < _HEADER.size:
                return
            (size,) = _HEADER.unpack(head)
            body = stream.read(size)
            if len(body) < size:
                return
            yield pickle.loads(body)
    except OSError:
        return
    finally:
        stream.close()


def _portable(result: object) -> object:
    """A unit's result as it can cross: ServiceErrors by class and fields (their constructors
    differ), any other exception as the RuntimeError its handler answers 451 to."""
    if isinstance(result, errors.ServiceError):
        return ("service_error", type(result), result.message, result.field, vars(result))
    if isinstance(result, BaseException):
        return ("error", f"{type(result).__name__}: {result}")
    return ("ok", result)


def _restored(kind: str, *fields) -> object:
    """The result ``_portable`` sent: the value, or the exception that fails the unit."""
    if kind == "ok":
        return fields[0]
    if kind == "service_error":
        cls, message, field, state = fields
        exc = cls.__new__(cls)
        errors.ServiceError.__init__(exc, message, field=field)
        exc.__dict__.update(state)
        return exc
    return RuntimeError(f"in the committer process: {fields[0]}")


class CommitterProcess:
    """A GroupCommitter whose group units are committed in a child process (module doc)."""

    def __init__(self, local: GroupCommitter):
        self.local = local
        self._lock = threading.Lock()  # the socket's writes, the pending units, the state
        self._sock: socket.socket | None = None
        self._child: subprocess.Popen | None = None
        self._pending: dict[int, Future] = {}
        self._next = 0
        self._env: dict | None = None  # os.environ's data as last sent to the child
        self._stopping = False
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the gateway's side --------------------------------------------------------------

    def start(self) -> "CommitterProcess":
        self._thread = threading.Thread(target=self._run, name="smtp-commit-process",
                                        daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = 60) -> bool:
        """Whether the child answers (units go to it from then on)."""
        return self._ready.wait(timeout)

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.pid if child is not None else None

    def submit(self, unit) -> Future:
        if not isinstance(unit, GroupUnit) or not self._ready.is_set():
            return self.local.submit(unit)
        future: Future = Future()
        data = getattr(os.environ, "_data", None)
        with self._lock:
            sock = self._sock
            if sock is None or not self._ready.is_set():
                return self.local.submit(unit)
            env = None
            if data is None or data != self._env:  # the settings changed: send them along
                env = dict(os.environ)
                self._env = dict(data) if data is not None else None
            self._next += 1
            ident = self._next
            self._pending[ident] = future
            try:
                sock.sendall(_frame((ident, unit, env)))
            except OSError:  # the child is gone: the reader fails what it held
                self._pending.pop(ident, None)
                return self.local.submit(unit)
        return future

    def stop(self, timeout: float = 15) -> None:
        """Close the child's socket (it answers what it holds, then exits) and wait for it."""
        self._stopping = True
        with self._lock:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(5)
        self.local.stop()

    # --- the reader thread: start, answers, restarts ---------------------------------------

    def _spawn(self) -> tuple[socket.socket, subprocess.Popen]:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "chalicelib.smtp.commit_process", str(theirs.fileno()),
                 # what logging.disable() turned off here is off there too
                 str(logging.root.manager.disable)],
                pass_fds=[theirs.fileno()], cwd=_ROOT, env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        return ours, child

    def _run(self) -> None:
        failures = 0
        while not self._stopping:
            started = time.monotonic()
            try:
                sock, child = self._spawn()
            except OSError:
                log.exception("could not start the SMTP committer process")
                sock = child = None
            if sock is not None:
                with self._lock:
                    self._sock, self._child, self._env = sock, child, None
                self._serve(sock)
                with self._lock:
                    self._sock = None
                    self._ready.clear()
                    lost, self._pending = self._pending, {}
                sock.close()
                code = child.wait()
                if lost:
                    log.error("SMTP committer process ended (exit %s) holding %d message(s): "
                              "answered 451, their clients send them again", code, len(lost))
                for future in lost.values():
                    settle(future, RuntimeError("the committer process ended"))
            if self._stopping:
                return
            failures = 0 if time.monotonic() - started > 60 else failures + 1
            pause = RESTART_PAUSES[min(failures, len(RESTART_PAUSES) - 1)]
            log.error("SMTP committer process stopped; starting another in %.1f s "
                      "(meanwhile mail is committed in the gateway's process)", pause)
            time.sleep(pause)

    def _serve(self, sock: socket.socket) -> None:
        for message in _frames(sock):
            if message == "ready":
                self._ready.set()
                continue
            answers, wakeups, counts, lines = message
            for queue, row_ids, delays in wakeups:
                queues.enqueue_many(queue, row_ids, delays)
            for name, value in counts.items():
                observability.count(name, value)
            observability.write_lines(lines)
            with self._lock:
                futures = [self._pending.pop(ident, None) for ident, _ in answers]
            for future, (_, result) in zip(futures, answers):
                if future is not None:
                    settle(future, _restored(*result))


# --- the child -------------------------------------------------------------------------------

class _Collected:
    """What the child's units do beyond their rows, kept to travel back with the next answer:
    it is the child's queue port (wake-ups), its metrics tally and its log stream."""

    def __init__(self):
        self.lock = threading.Lock()
        self.wakeups: list[tuple[str, list[int], list[float]]] = []
        self.counts: dict[str, float] = {}
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        with self.lock:
            self.lines.append(text)

    def flush(self) -> None:
        pass

    def send(self, queue: str, body: dict, delay_seconds: float = 0) -> None:
        self.send_many(queue, [body], [delay_seconds])

    def send_many(self, queue: str, bodies: list[dict], delays=None) -> None:
        with self.lock:
            self.wakeups.append((queue, [b["id"] for b in bodies],
                                 list(delays) if delays else [0.0] * len(bodies)))

    def add_counts(self, new: dict[str, float]) -> dict[str, float]:
        with self.lock:
            for name, value in new.items():
                self.counts[name] = self.counts.get(name, 0) + value
        return new

    def take(self) -> tuple[list, dict, str]:
        observability.push_counts()
        with self.lock:
            wakeups, self.wakeups = self.wakeups, []
            counts, self.counts = self.counts, {}
            lines, self.lines = self.lines, []
        return wakeups, counts, "".join(lines)


def _apply_environment(env: dict) -> None:
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def main(argv: list[str]) -> int:
    for signum in (signal.SIGINT, signal.SIGTERM):  # stop only when the gateway says so
        signal.signal(signum, signal.SIG_IGN)
    from chalicelib.config import get_settings

    logging.basicConfig(level=get_settings().log_level.upper(),
                        format="%(asctime)s %(levelname)s smtp-commit[%(process)d] %(name)s: "
                               "%(message)s")
    if len(argv) > 1:
        logging.disable(int(argv[1]))
    from chalicelib.db import engine

    # This process runs the same few statements all day on connections it keeps: each is
    # planned once per connection (most of the database's time for them).
    engine.use_named_statements()
    sock = socket.socket(fileno=int(argv[0]))
    lock = threading.Lock()
    collected = _Collected()
    queues.set_port(collected)
    observability.share_counters(collected.add_counts)
    observability.capture(collected)
    outbox: list[tuple[int, tuple]] = []  # answers not sent yet

    def answer(ident: int, future: Future) -> None:
        exc = future.exception()
        result = _portable(exc if exc is not None else future.result())
        with lock:
            outbox.append((ident, result))

    def send_answers() -> None:
        """One frame with every answer made since the last (a batch's, or a refusal's)."""
        with lock:
            if not outbox:
                return
            answers = outbox[:]
            outbox.clear()
        data = _frame((answers, *collected.take()))
        try:
            with lock:
                sock.sendall(data)
        except OSError:  # the gateway is gone
            pass
        observability.flush()

    # This thread only reads the socket: it parses too (prepare_inline).
    committer = GroupCommitter(prepare_inline=True, after_batch=send_answers)
    sock.sendall(_frame("ready"))
    for ident, unit, env in _frames(sock):
        if env is not None:
            _apply_environment(env)
        committer.submit(unit).add_done_callback(lambda f, i=ident: answer(i, f))
        send_answers()  # a refusal while parsing is answered at once
    committer.stop()  # answers every unit it holds first
    send_answers()
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
