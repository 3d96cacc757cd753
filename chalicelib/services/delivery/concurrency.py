"""How many SMTP conversations a process carries at once: one I/O pool per process
(DELIVERY_CONCURRENCY threads), sized for waiting on remote servers, not for cores.

A batch's destinations run side by side on it (``batch.py``), one destination's messages
per thread (they go over one session, one connection slot); every batch handed to the
process at once (a Lambda invocation's, the local worker threads') shares the pool, so the
process never carries more than DELIVERY_CONCURRENCY conversations, and pacing's slots hold
each destination to its own limit. A conversation holds a database connection only for its
short writes (the claim, the in-flight marker, the outcome), never while waiting on the
network, so the database pool stays small.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable

from chalicelib.config import get_settings

_pool: ThreadPoolExecutor | None = None
_size = 0
_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool, _size
    size = get_settings().delivery_concurrency
    with _lock:
        if _pool is None or _size != size:
            old, _pool, _size = _pool, ThreadPoolExecutor(
                size, thread_name_prefix="delivery-io"), size
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def width() -> int:
    return get_settings().delivery_concurrency


def run_all(tasks: list[Callable[[], object]]) -> list:
    """Run ``tasks`` at once on the pool and wait for all of them; their results in order.
    An exception of one (a BaseException included: a test's simulated kill) is raised once
    every task has ended, the others' work kept. The caller must not be a pool thread."""
    if len(tasks) <= 1 or width() <= 1:
        return [task() for task in tasks]
    futures = [_executor().submit(task) for task in tasks]
    first_error, results = None, []
    wait(futures)
    for future in futures:
        error = future.exception()
        if error is not None:
            first_error = first_error or error
            results.append(None)
        else:
            results.append(future.result())
    if first_error is not None:
        raise first_error
    return results
