"""The queue port: wake-up calls for rows, never the work itself.

A queue message says "look at row N" (``{"id": N}``). Two adapters:

* ``SqsPort`` (QUEUE_BACKEND=sqs): boto3; SQS delays stop at 900 s, so a longer delay is sent
  as 900 s and the consumer, waking early, re-enqueues itself for the rest.
* ``LocalPort`` (default): an in-process scheduler thread plus worker threads, used by
  ``make run`` and the tests.

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

QUEUE_NAMES = ("deliveries", "webhooks", "inbound")
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


class LocalPort:
    """Delayed messages in a heap; due ones are handed to a thread pool running the same
    per-record dispatcher that the Lambda handlers use."""

    def __init__(self, workers: int = 4):
        self._heap: list[tuple[float, int, str, str]] = []
        self._counter = itertools.count()
        self._cv = threading.Condition()
        self._handler: Callable[[str, str], None] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._workers = workers

    def send(self, queue: str, body: dict, delay_seconds: float = 0) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay_seconds),
                                        next(self._counter), queue, json.dumps(body)))
            self._cv.notify()

    def pending(self) -> int:
        with self._cv:
            return len(self._heap)

    def start(self, handler: Callable[[str, str], None]) -> None:
        self._handler = handler
        self._stopping = False
        from concurrent.futures import ThreadPoolExecutor  # local stack only, not at cold start

        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="queue-worker")
        self._thread = threading.Thread(target=self._run, name="queue-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread:
            self._thread.join(timeout=5)
        if self._pool:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._thread = self._pool = None

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopping:
                    if self._heap and self._heap[0][0] <= time.monotonic():
                        break
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cv.wait(timeout)
                if self._stopping:
                    return
                _, _, queue, body = heapq.heappop(self._heap)
            self._pool.submit(self._safe_handle, queue, body)

    def _safe_handle(self, queue: str, body: str) -> None:
        try:
            self._handler(queue, body)
        except Exception:  # noqa: BLE001  (the dispatcher should not raise; belt and braces)
            log.exception("local queue handler failed for %s", queue)


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


def enqueue_after_commit(session, queue: str, row_id: int, delay_seconds: float = 0) -> None:
    after_commit(session, lambda: enqueue(queue, row_id, delay_seconds))
