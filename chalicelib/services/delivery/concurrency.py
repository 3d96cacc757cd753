"""How many SMTP conversations a process carries at once: one I/O pool per process
(DELIVERY_CONCURRENCY threads), sized for waiting on remote servers, not for cores.

A batch's destinations run side by side on it (``batch.py``), one destination's messages
per thread (they go over one session, one connection slot); every batch handed to the
process at once (a Lambda invocation's, the local worker threads') shares the pool, so the
process never carries more than DELIVERY_CONCURRENCY conversations, and pacing's slots hold
each destination to its own limit. A conversation holds a database connection only for its
short writes (the claim, the in-flight marker, the outcome), never while waiting on the
network, so the database pool stays small.

One destination's messages of a batch go over one session, one after another, unless the
round trips to it were seen to be long (``far``: at each new session's EHLO and each
pipelined flight); then over several sessions side by side (``split``), at most the
process's share of the destination's connections (pacing's slots still decide how many
open: a run finding none free hands its messages to one that has a slot). Over one session
a message costs two round trips (pipelined), so a batch of 100 to a destination 50 ms away
takes ten seconds in one run; on loopback or next door the round trips cost less than a
message's CPU, and one session (its outcomes riding on the next message's marker) is
cheapest.

The pool is a plain one (threads taking tasks from one queue), not ``concurrent.futures``: a
batch's tasks carry no future each (a condition, a lock and a notification per task, ~8 us
of CPU more a destination); the batch waits on one event, set by its last task.
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
from typing import Callable

from chalicelib.config import get_settings


class _Batch:
    """One ``run_all``: its tasks' results (or errors) by position, and the event its last
    task sets."""

    __slots__ = ("size", "ended", "done", "results", "failed")

    def __init__(self, size: int):
        self.size = size
        self.ended = itertools.count(1)  # next() is atomic: the task that ends last sees size
        self.done = threading.Event()
        self.results: list = [None] * size
        self.failed: list[bool] = [False] * size


class _Pool:
    """At most ``size`` threads, started as the tasks outstanding need them, each taking the
    next task from one queue; a None tells a thread to end (the pool was replaced)."""

    def __init__(self, size: int):
        self.size = size
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = 0
        self.outstanding = 0  # tasks of the batches running now
        self.closed = False
        self.lock = threading.Lock()

    def run(self, tasks: list[Callable[[], object]]) -> _Batch | None:
        """The batch, once every task has ended; None when the pool was closed first."""
        batch = _Batch(len(tasks))
        with self.lock:  # queued ahead of a ``close``'s Nones: its threads run them first
            if self.closed:
                return None
            self.outstanding += batch.size
            while self.threads < min(self.size, self.outstanding):
                self.threads += 1
                threading.Thread(target=self._work, daemon=True,
                                 name=f"delivery-io_{self.threads}").start()
            for index, task in enumerate(tasks):
                self.tasks.put((batch, index, task))
        try:
            batch.done.wait()
        finally:
            with self.lock:
                self.outstanding -= batch.size
        return batch

    def _work(self) -> None:
        take = self.tasks.get
        while True:
            item = take()
            if item is None:
                return
            batch, index, task = item
            try:
                batch.results[index] = task()
            except BaseException as error:  # noqa: BLE001  (a test's simulated kill too)
                batch.results[index], batch.failed[index] = error, True
            del item, task  # nothing of the batch kept while the thread waits
            if next(batch.ended) == batch.size:
                batch.done.set()
            del batch

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for _ in range(self.threads):
                self.tasks.put(None)


#: The shortest round trip seen lately to a destination (``saw_round_trip``) from which it
#: is ``far``: its messages of a batch are spread over several sessions (``split``).
SPREAD_ROUND_TRIP = 0.010
_SAMPLES = 8  # the latest round trips kept per destination; the shortest one counts
_DOMAINS_MAX = 10000
_round_trips: dict[str, list[float]] = {}


def saw_round_trip(domain: str, seconds: float) -> None:
    """A round trip to ``domain``'s server (its MX host, or the relay) took ``seconds``: a
    new session's EHLO (``connect.py``) or a message's pipelined MAIL, RCPT and DATA until
    the last reply (``client.py``). The shortest of the latest few is the destination's round
    trip: a busy moment on either side lengthens one, never all."""
    samples = _round_trips.get(domain)
    if samples is None:
        if len(_round_trips) >= _DOMAINS_MAX:
            _round_trips.clear()
        samples = _round_trips.setdefault(domain, [])
    samples.append(seconds)
    del samples[:-_SAMPLES]


def round_trip(domain: str) -> float | None:
    """The destination's round trip as seen lately (None: not seen twice yet: one sample
    may be a busy moment's)."""
    samples = _round_trips.get(domain)
    return min(samples) if samples and len(samples) > 1 else None


def far(domain: str) -> bool:
    """Whether ``domain``'s round trips were seen to take SPREAD_ROUND_TRIP or more."""
    seen = round_trip(domain)
    return seen is not None and seen >= SPREAD_ROUND_TRIP


def forget_round_trips() -> None:
    _round_trips.clear()


def split(messages: list, share: int) -> list[list]:
    """A far destination's messages of a batch as the runs that carry them side by side (each
    its own session, in order): up to ``share`` runs (the process's share of the
    destination's connections) and no more than the pool carries at once, as even as they
    come."""
    runs = max(1, min(len(messages), share, width()))
    size, larger = divmod(len(messages), runs)
    out, start = [], 0
    for index in range(runs):
        end = start + size + (1 if index < larger else 0)
        out.append(messages[start:end])
        start = end
    return out


_pool: _Pool | None = None
_pid = 0
_lock = threading.Lock()


def _current() -> _Pool:
    global _pool, _pid
    size = get_settings().delivery_concurrency
    with _lock:
        if _pool is None or _pool.size != size or _pid != os.getpid():
            old = _pool if _pid == os.getpid() else None  # a fork's parent keeps its own
            _pool, _pid = _Pool(size), os.getpid()
            if old is not None:
                old.close()  # its threads end once their tasks have
        return _pool


def width() -> int:
    return get_settings().delivery_concurrency


def run_all(tasks: list[Callable[[], object]]) -> list:
    """Run ``tasks`` at once on the pool and wait for all of them; their results in order.
    An exception of one (a BaseException included: a test's simulated kill) is raised once
    every task has ended, the others' work kept. The caller must not be a pool thread."""
    if len(tasks) <= 1 or width() <= 1:
        return [task() for task in tasks]
    batch = None
    while batch is None:  # (the pool replaced meanwhile: DELIVERY_CONCURRENCY changed)
        batch = _current().run(tasks)
    for index, failed in enumerate(batch.failed):
        if failed:
            raise batch.results[index]
    return batch.results
