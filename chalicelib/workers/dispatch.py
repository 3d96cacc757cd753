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


def queue_for_source_arn(arn: str, prefix: str) -> str | None:
    name = arn.rsplit(":", 1)[-1]
    return name[len(prefix):] if name.startswith(prefix) else None


def handle_sqs_event(event, prefix: str) -> dict:
    """Chalice SQS event -> dispatch each record on its own."""
    outcomes: dict[str, int] = {}
    for record in event:
        queue = queue_for_source_arn(record.to_dict().get("eventSourceARN", ""), prefix)
        outcome = dispatch(queue or "", record.body)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes
