"""Per-record handling of wake-ups. Never raises: a poison message (unparseable, or naming a
row that is gone) is logged and dropped, and a failure while working on a real row leaves the
row due, so the sweeper wakes it again. Chalice cannot report partial batch failures
(aws/chalice#2029), so the batch as a whole always succeeds and nothing loops for ever."""
from __future__ import annotations

import json
import logging

from chalicelib.workers.registry import load_workers

log = logging.getLogger(__name__)


def parse_wakeup(body: str) -> int | None:
    try:
        data = json.loads(body)
        row_id = data["id"]
    except (ValueError, TypeError, KeyError):
        return None
    if isinstance(row_id, bool) or not isinstance(row_id, int) or row_id < 1:
        return None
    return row_id


def dispatch(queue: str, body: str) -> str:
    """Handle one wake-up; returns what happened ("done", "poison", "unknown-queue", "failed")."""
    worker = load_workers().get(queue)
    if worker is None:
        log.error("no worker for queue %r; dropping %r", queue, body[:200])
        return "unknown-queue"
    row_id = parse_wakeup(body)
    if row_id is None:
        log.error("poison message on %s dropped: %r", queue, body[:200])
        return "poison"
    try:
        worker.process(row_id)
        return "done"
    except Exception:  # noqa: BLE001
        log.exception("worker for %s failed on row %s; the sweeper will retry it", queue, row_id)
        return "failed"


def dispatch_batch(queue: str, bodies: list[str]) -> dict[str, int]:
    """Handle several wake-ups of one queue together (an SQS batch): the worker's
    ``process_batch`` when it has one, else one by one. Never raises; returns how many
    records ended how ("done", "poison", "unknown-queue", "failed")."""
    outcomes: dict[str, int] = {}

    def count(outcome: str, n: int = 1) -> None:
        outcomes[outcome] = outcomes.get(outcome, 0) + n

    worker = load_workers().get(queue)
    if worker is None or worker.process_batch is None or len(bodies) == 1:
        for body in bodies:
            count(dispatch(queue, body))
        return outcomes
    row_ids = []
    for body in bodies:
        row_id = parse_wakeup(body)
        if row_id is None:
            log.error("poison message on %s dropped: %r", queue, body[:200])
            count("poison")
        else:
            row_ids.append(row_id)
    if row_ids:
        try:
            worker.process_batch(row_ids)
            count("done", len(row_ids))
        except Exception:  # noqa: BLE001
            log.exception("worker for %s failed on rows %s; the sweeper will retry them",
                          queue, row_ids)
            count("failed", len(row_ids))
    return outcomes


def queue_for_source_arn(arn: str, prefix: str) -> str | None:
    name = arn.rsplit(":", 1)[-1]
    return name[len(prefix):] if name.startswith(prefix) else None


def handle_sqs_event(event, prefix: str) -> dict:
    """Chalice SQS event -> the records of each queue handled as one batch."""
    by_queue: dict[str, list[str]] = {}
    for record in event:
        queue = queue_for_source_arn(record.to_dict().get("eventSourceARN", ""), prefix)
        by_queue.setdefault(queue or "", []).append(record.body)
    outcomes: dict[str, int] = {}
    for queue, bodies in by_queue.items():
        for outcome, n in dispatch_batch(queue, bodies).items():
            outcomes[outcome] = outcomes.get(outcome, 0) + n
    return outcomes
