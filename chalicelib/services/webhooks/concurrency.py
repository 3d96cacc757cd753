"""How many webhook POSTs a process has in flight: one process-wide pool of
WEBHOOKS_CONCURRENCY threads that every batch (``batch.py``) hands its rows to, so a worker
process (a Lambda container) waits on many receivers at once instead of one after another.

A batch is cut into *lanes*: the rows one webhook gets about one message (its events, in id
order) form one lane, delivered one after another in a single thread, so those events reach
the receiver in the order they happened; every other row is a lane of its own. The lanes of
a batch run side by side, up to the pool's size across all batches of the process. A row is
only ever in one lane of one batch, and the batch holds its claim (the row lock on
PostgreSQL, ``locked_by`` elsewhere) until every lane has finished, so a row is never posted
twice at once; when a lane raises, the batch still waits for the others before the error
leaves it (its claims must not end while a POST is in flight).

WEBHOOKS_CONCURRENCY=1 runs the lanes in the calling thread, in id order: the behaviour
before this pool (each worker thread one POST at a time).

The keep-alive pools per receiver (``http.py``) keep as many connections as POSTs can be in
flight at once, so a receiver's connections are reused, never opened and dropped per POST.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Hashable, Iterable, TypeVar

from chalicelib.config import Settings

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_size = 0
_pid = 0


def lanes(rows: Iterable[T], key: Callable[[T], Hashable | None]) -> list[list[T]]:
    """``rows`` (in id order) cut into lanes: rows of one non-None key together, in order;
    a row whose key is None alone. Lanes are ordered by their first row."""
    grouped: dict = {}
    out: list[list[T]] = []
    for row in rows:
        k = key(row)
        if k is None:
            out.append([row])
            continue
        lane = grouped.get(k)
        if lane is None:
            lane = grouped[k] = []
            out.append(lane)
        lane.append(row)
    return out


def run_lanes(rows: list[T], key: Callable[[T], Hashable | None],
              deliver: Callable[[list[T]], list[R]], settings: Settings) -> list[R]:
    """``deliver`` for each lane of ``rows`` (see ``lanes``), side by side on the process's
    pool; with WEBHOOKS_CONCURRENCY=1, in the calling thread for each row in turn, in id
    order, as before. ``deliver`` must keep no state of its own between calls: a lane's
    state belongs to its key. Waits for every lane, then re-raises the first error, if any.
    Returns the results of the lanes, concatenated."""
    if settings.webhooks_concurrency <= 1:
        return [result for row in rows for result in deliver([row])]
    executor = _pool(settings)
    futures = [executor.submit(deliver, lane) for lane in lanes(rows, key)]
    wait(futures)  # every POST of the batch is over before its claims can end
    return [result for future in futures for result in future.result()]  # first error raises


def _pool(settings: Settings) -> ThreadPoolExecutor:
    global _executor, _size, _pid
    size = settings.webhooks_concurrency
    with _lock:
        if _executor is None or _size != size or _pid != os.getpid():
            old = _executor if _pid == os.getpid() else None
            _executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="webhook-post")
            _size, _pid = size, os.getpid()
            if old is not None:
                old.shutdown(wait=False)  # its running POSTs finish; it takes no more
        return _executor
