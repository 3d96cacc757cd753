"""Which function handles each queue, and how the sweeper finds each queue's due rows.

Worker modules register themselves at import (see ``load_workers``)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass
class QueueWorker:
    queue: str
    process: Callable[[int], object]        # handle one wake-up for row id (answer unused)
    # (db, limit, grace, sweeping=True) -> due row ids (claims.due_ids)
    find_due: Callable[..., list[int]]
    # Handle several wake-ups at once (row ids -> what happened to each); None: one by one.
    process_batch: Callable[[list[int]], dict] | None = None


WORKERS: dict[str, QueueWorker] = {}

# Modules that register workers; later issues append theirs.
WORKER_MODULES: list[str] = [
    "chalicelib.workers.delivery",
    "chalicelib.workers.webhooks",
    "chalicelib.workers.inbound",
    "chalicelib.workers.bulk",
]


def register(worker: QueueWorker) -> None:
    WORKERS[worker.queue] = worker


def load_workers() -> dict[str, QueueWorker]:
    for module in WORKER_MODULES:
        importlib.import_module(module)
    return WORKERS
