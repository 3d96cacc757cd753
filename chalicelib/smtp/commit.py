"""Group commit for the gateway: DATA from many connections shares transactions.

A message is only acknowledged (250) once it is committed, and one commit per message caps
throughput at the database's commit rate. Units of work queue here; a committer thread takes
what has queued up (up to ``max_batch``) and runs it in ONE transaction with one commit.

Two kinds of unit:
* a plain callable ``unit(db) -> result``, run one after the other;
* a :class:`GroupUnit`: first ``prepare()`` outside any transaction (CPU-only checks such as
  MIME parsing; a ServiceError there refuses that unit alone), then all units of the batch with
  the same ``group`` key go to one ``run_group(db, units)`` call, which does the work for all of
  them with bulk statements and returns, per unit, its result or the ServiceError refusing it
  (a refusal decided in Python after its queries succeeded, so the transaction stays usable).

A GroupUnit's ``prepare()`` runs in the committer's one prepare thread, which then queues the
unit for the committer: the event loop hands a message off once and is woken once, with its
answer (each hop on a busy machine waits for a core and the GIL), the batch is never held up
by parsing, and one thread parses because parsing holds the GIL: more threads only contend
with the loop (bench_smtp's section in bench/RESULTS.md). Both queues are SimpleQueues (C,
no Python-level lock on the loop's side).

When anything else raises (a database error) or the commit fails, the transaction is rolled
back as a whole and every unit of the batch is run again in a transaction of its own, so each
caller gets exactly its own result or error and no client is told "250" for a message that was
not stored. One committer thread by default: every batch of a server upserts the same
statistics counter rows, so a second transaction in flight only waits on their row locks
(bench_smtp: 2 threads ~210/s, 1 thread ~400/s); the batch simply grows while one commits.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future, InvalidStateError
from typing import Callable, Hashable

from sqlalchemy.orm import Session

from chalicelib.db import session_scope

log = logging.getLogger(__name__)

Unit = Callable[[Session], object]


class GroupUnit:
    """A unit that can share statements with units of the same ``group`` (see module doc)."""

    group: Hashable = None

    def prepare(self) -> None:
        """CPU-only work before the transaction; raise ServiceError to refuse this unit."""

    @classmethod
    def run_group(cls, db: Session, units: list["GroupUnit"]) -> list[object]:
        raise NotImplementedError


def _run_units(db: Session, units: list) -> list[object]:
    """Results (or ServiceErrors of GroupUnits) in order; raises on anything else."""
    results: list[object] = [None] * len(units)
    groups: dict[tuple, list[int]] = {}
    for index, unit in enumerate(units):
        if isinstance(unit, GroupUnit):
            groups.setdefault((type(unit), unit.group), []).append(index)
        else:
            results[index] = unit(db)
    for (kind, _), indexes in groups.items():
        for index, result in zip(indexes, kind.run_group(db, [units[i] for i in indexes])):
            results[index] = result
    return results


def settle(future: Future, result: object) -> None:
    """Answer one unit (an exception ``result`` fails it). A future already cancelled (aiosmtpd cancels the handler when its
    client disconnects, and asyncio.wrap_future cancels the future) is skipped: raising here
    would leave the batch's other clients, whose mail is stored, without their 250 and kill
    the prepare thread."""
    try:
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass


class GroupCommitter:
    def __init__(self, threads: int = 1, max_batch: int = 64, prepare_inline: bool = False,
                 after_batch: Callable[[], None] | None = None):
        """``prepare_inline``: GroupUnits are prepared in the thread that submits them, not in
        the prepare thread: for a caller that has nothing else to do meanwhile (the committer
        process's reader, smtp/commit_process.py), one thread hand-off less per message.
        ``after_batch``: called in the committer thread once a batch's units are answered
        (the committer process sends the batch's answers together)."""
        self.max_batch = max_batch
        self.after_batch = after_batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()  # ready for a transaction
        self._to_prepare: queue.SimpleQueue = queue.SimpleQueue()
        self._preparer = None if prepare_inline else threading.Thread(
            target=self._prepare_loop, name="smtp-prepare", daemon=True)
        self._threads = [threading.Thread(target=self._loop, name=f"smtp-commit-{i}",
                                          daemon=True) for i in range(threads)]
        for thread in [self._preparer, *self._threads]:
            if thread is not None:
                thread.start()

    def submit(self, unit) -> Future:
        """The unit's result (or error) once committed; a GroupUnit is prepared first (a
        refusal there settles the future at once and nothing is queued)."""
        future: Future = Future()
        if not isinstance(unit, GroupUnit):
            self._queue.put((unit, future))
        elif self._preparer is None:
            self._prepare((unit, future))
        else:
            self._to_prepare.put((unit, future))
        return future

    def stop(self) -> None:
        if self._preparer is not None:
            self._to_prepare.put(None)  # first: nothing is queued behind the committers' stop
            self._preparer.join(timeout=10)
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=10)

    def _prepare_loop(self) -> None:
        while True:
            item = self._to_prepare.get()
            if item is None:
                return
            self._prepare(item)

    def _prepare(self, item: tuple) -> None:
        unit, future = item
        try:
            unit.prepare()
        except BaseException as exc:  # noqa: BLE001  (this unit's own refusal: answer it)
            settle(future, exc)
        else:
            self._queue.put(item)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # leave the stop signal for this loop's next turn
                    break
                batch.append(nxt)
            try:
                self._run(batch)
            except BaseException as exc:  # noqa: BLE001  (never leave a client without answer)
                log.exception("group commit failed")
                for _, future in batch:
                    if not future.done():
                        settle(future, exc)
            if self.after_batch is not None:
                self.after_batch()

    def _run(self, batch: list[tuple[object, Future]]) -> None:
        if not batch:
            return
        if len(batch) > 1:
            try:
                with session_scope() as db:
                    results = _run_units(db, [unit for unit, _ in batch])
            except Exception:  # noqa: BLE001  (a unit failed or the commit did: redo alone)
                pass
            else:
                for (_, future), result in zip(batch, results):
                    settle(future, result)
                return
        for unit, future in batch:
            try:
                with session_scope() as db:
                    result = _run_units(db, [unit])[0]
            except Exception as exc:  # noqa: BLE001  (this unit's own failure, nothing stored)
                settle(future, exc)
            else:
                settle(future, result)
