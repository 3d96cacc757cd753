"""The queue port: wake-up calls for rows, never the work itself.

A queue message says "look at row N" (``{"id": N}``). Two adapters:

* ``SqsPort`` (QUEUE_BACKEND=sqs): boto3; SQS delays stop at 900 s, so a longer delay is sent
  as 900 s and the consumer, waking early, re-enqueues itself for the rest.
* ``LocalPort`` (default): an in-process ``Schedule`` plus worker threads, used by the tests
  and by ``make run`` with WORKER_PROCESSES=0 (worker processes share a ``Schedule`` through
  local/broker.py).

Queue names are logical ("deliveries", "webhooks", "inbound"); SQS names add SQS_QUEUE_PREFIX.
"""
from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Protocol

from chalicelib.config import get_settings
from chalicelib.db import after_commit

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

# The queues, by what their wake-ups name: outgoing messages, webhook requests, inbound
# messages (to their route's endpoint), bulk jobs.
DELIVERIES, WEBHOOKS, INBOUND, BULK = "deliveries", "webhooks", "inbound", "bulk"
QUEUE_NAMES = (DELIVERIES, WEBHOOKS, INBOUND, BULK)
SQS_MAX_DELAY = 900


class QueuePort(Protocol):
    def send(self, queue: str, body: dict, delay_seconds: float = 0) -> None: ...


class SqsPort:
    def __init__(self, client=None, prefix: str | None = None):
        import boto3

        self._client = client or boto3.client("sqs")
        self._prefix = get_settings().sqs_queue_prefix if prefix is None else prefix
        self._urls: dict[str, str] = {}

    def queue_name(self, queue: str) -> str:
        return self._prefix + queue

    def _url(self, queue: str) -> str:
        url = self._urls.get(queue)
        if url is None:
            url = self._urls[queue] = self._client.get_queue_url(
                QueueName=self.queue_name(queue))["QueueUrl"]
        return url

    def send(self, queue: str, body: dict, delay_seconds: float = 0) -> None:
        delay = max(0, min(SQS_MAX_DELAY, int(delay_seconds + 0.999)))
        self._client.send_message(QueueUrl=self._url(queue), MessageBody=json.dumps(body),
                                  DelaySeconds=delay)

    def send_many(self, queue: str, bodies: list[dict],
                  delays: list[float] | None = None) -> None:
        """Wake-ups (each with its delay, default now), ten per SendMessageBatch call (SQS's
        maximum) instead of one call each: a batch send or a bulk release of thousands."""
        delays = delays or [0] * len(bodies)
        for start in range(0, len(bodies), 10):
            entries = [{"Id": str(i), "MessageBody": json.dumps(body),
                        "DelaySeconds": max(0, min(SQS_MAX_DELAY, int(delay + 0.999)))}
                       for i, (body, delay) in enumerate(zip(bodies[start:start + 10],
                                                             delays[start:start + 10]))]
            answer = self._client.send_message_batch(QueueUrl=self._url(queue), Entries=entries)
            if answer.get("Failed"):
                log.error("%d wake-ups on %s not sent; the sweeper will pick them up",
                          len(answer["Failed"]), queue)


class Schedule:
    """Wake-ups by due time (a heap), handed out a batch of one queue at a time. Thread-safe;
    the in-process ``LocalPort`` consumes one, and `make run`'s broker (local/broker.py)
    shares one with worker processes."""

    def __init__(self):
        self._heap: list[tuple[float, int, str, str]] = []
        self._counter = itertools.count()
        self._cv = threading.Condition()

    def push_many(self, queue: str, bodies: list[str], delays: list[float] | None = None) -> None:
        now = time.monotonic()
        with self._cv:
            for index, body in enumerate(bodies):
                delay = max(0.0, delays[index]) if delays else 0.0
                heapq.heappush(self._heap, (now + delay, next(self._counter), queue, body))
            self._cv.notify(len(bodies))

    def pending(self) -> int:
        with self._cv:
            return len(self._heap)

    def wake_all(self) -> None:
        """Wakes every ``take`` waiting, so it can see that its caller stops."""
        with self._cv:
            self._cv.notify_all()

    def take(self, limit: int, timeout: float,
             stopping: Callable[[], bool] = lambda: False,
             limits: dict[str, int] | None = None) -> tuple[str, list[str]] | None:
        """The first due wake-up and up to ``limit - 1`` more due ones of its queue (or its
        own ``limits`` entry), in time order; None after ``timeout`` seconds without one, or
        once ``stopping()``."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not stopping():
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    _, _, queue, body = heapq.heappop(self._heap)
                    most = (limits or {}).get(queue, limit)
                    return queue, [body] + self._take_due(queue, most - 1)
                if now >= deadline:
                    return None
                wait = deadline - now
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                self._cv.wait(wait)
        return None

    def _take_due(self, queue: str, limit: int) -> list[str]:
        """Up to ``limit`` more due wake-ups of ``queue``, in time order (caller holds _cv)."""
        if limit <= 0:
            return []
        # Popped in time order, other queues' due entries set aside and pushed back: the cost
        # follows what is taken, not the backlog (sorting and re-heapifying the whole heap per
        # take was quadratic in it: ~5% of make run's CPU per message at 2,000 queued).
        now = time.monotonic()
        heap, taken, aside = self._heap, [], []
        while heap and heap[0][0] <= now and len(taken) < limit:
            entry = heapq.heappop(heap)
            if entry[2] == queue:
                taken.append(entry[3])
            else:
                aside.append(entry)
        for entry in aside:
            heapq.heappush(heap, entry)
        return taken


class LocalPort:
    """Delayed messages in a ``Schedule``; due ones are handed to a thread pool running the
    same per-record dispatcher that the Lambda handlers use."""

    BATCH_SIZE = 10  # SQS's batch size for a Lambda (app.py), but for deliveries:

    @staticmethod
    def batch_limits() -> dict[str, int]:
        """Per-queue batch sizes: deliveries take DELIVERY_BATCH_SIZE at once (their SMTP
        conversations run side by side on the process's delivery pool)."""
        return {DELIVERIES: get_settings().delivery_batch_size}

    def __init__(self, workers: int = 4, schedule: Schedule | None = None):
        self._batch_handler = None
        self.schedule = schedule or Schedule()
        self._handler: Callable[[str, str], None] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._workers = workers

    def send(self, queue: str, body: dict, delay_seconds: float = 0) -> None:
        self.schedule.push_many(queue, [json.dumps(body)], [delay_seconds])

    def send_many(self, queue: str, bodies: list[dict],
                  delays: list[float] | None = None) -> None:
        self.schedule.push_many(queue, [json.dumps(body) for body in bodies], delays)

    def pending(self) -> int:
        return self.schedule.pending()

    def start(self, handler: Callable[[str, str], None],
              batch_handler: Callable[[str, list[str]], object] | None = None) -> None:
        """``batch_handler``: given, due wake-ups are handed over up to BATCH_SIZE at a time
        per queue, as an SQS batch reaches a Lambda."""
        self._handler = handler
        self._batch_handler = batch_handler
        self._stopping = False
        from concurrent.futures import ThreadPoolExecutor  # local stack only, not at cold start

        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="queue-worker")
        self._free = threading.Semaphore(self._workers)
        self._thread = threading.Thread(target=self._run, name="queue-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self.schedule.wake_all()
        if self._thread:
            self._thread.join(timeout=5)
        if self._pool:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._thread = self._pool = None

    def _run(self) -> None:
        limit = self.BATCH_SIZE if self._batch_handler is not None else 1
        stopping = lambda: self._stopping  # noqa: E731
        while True:
            # Take work only when a worker thread is free: meanwhile wake-ups pile up in the
            # schedule and the next free worker takes a whole batch of them.
            while not self._free.acquire(timeout=0.1):
                if self._stopping:
                    return
            taken = None
            while taken is None and not self._stopping:
                taken = self.schedule.take(limit, 1.0, stopping,
                                           self.batch_limits() if limit > 1 else None)
            if taken is None:
                self._free.release()
                return
            self._pool.submit(self._safe_handle, *taken)

    def _safe_handle(self, queue: str, bodies: list[str]) -> None:
        try:
            if len(bodies) == 1:
                self._handler(queue, bodies[0])
            else:
                self._batch_handler(queue, bodies)
        except Exception:  # noqa: BLE001  (the dispatcher should not raise; belt and braces)
            log.exception("local queue handler failed for %s", queue)
        finally:
            self._free.release()


_port: QueuePort | None = None
_port_lock = threading.Lock()


def get_port() -> QueuePort:
    global _port
    if _port is None:
        with _port_lock:
            if _port is None:
                _port = SqsPort() if get_settings().queue_backend == "sqs" else LocalPort()
    return _port


def set_port(port: QueuePort | None) -> None:
    """Install a port (the local stack, tests)."""
    global _port
    _port = port


def enqueue(queue: str, row_id: int, delay_seconds: float = 0) -> None:
    if queue not in QUEUE_NAMES:
        raise ValueError(f"unknown queue {queue}")
    try:
        get_port().send(queue, {"id": row_id}, delay_seconds)
    except Exception:  # noqa: BLE001
        # The row is the truth: the sweeper will find it. Losing a wake-up only delays work.
        log.exception("could not enqueue %s/%s; the sweeper will pick it up", queue, row_id)


def enqueue_many(queue: str, row_ids: list[int], delays: list[float] | None = None) -> None:
    """Wake-ups for many rows (due now, or after their ``delays``), batched where the port
    can (SQS: ten a call)."""
    if queue not in QUEUE_NAMES:
        raise ValueError(f"unknown queue {queue}")
    port = get_port()
    try:
        send_many = getattr(port, "send_many", None)
        if send_many is not None:
            send_many(queue, [{"id": i} for i in row_ids], delays)
        else:
            for index, row_id in enumerate(row_ids):
                port.send(queue, {"id": row_id}, delays[index] if delays else 0)
    except Exception:  # noqa: BLE001  (the rows are the truth; the sweeper finds them)
        log.exception("could not enqueue %d %s rows; the sweeper will pick them up",
                      len(row_ids), queue)


def enqueue_after_commit(session, queue: str, row_id: int, delay_seconds: float = 0) -> None:
    """A wake-up sent once the session commits. The wake-ups of one transaction are sent
    together, per queue (enqueue_many: ten a SendMessageBatch call on SQS, not one call
    each: a batch send of 500 messages is 50 calls, not 500)."""
    pending = session.info.get("wakeups")
    if pending is None:
        pending = session.info["wakeups"] = {}
        after_commit(session, lambda: _send_pending(session.info.pop("wakeups", {})))
    pending.setdefault(queue, []).append((row_id, delay_seconds))


def _send_pending(pending: dict[str, list[tuple[int, float]]]) -> None:
    for queue, wakeups in pending.items():
        if len(wakeups) == 1:
            enqueue(queue, *wakeups[0])
        else:
            enqueue_many(queue, [row_id for row_id, _ in wakeups],
                         [delay for _, delay in wakeups])
