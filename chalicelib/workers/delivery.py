"""Queue "deliveries": each wake-up names an outgoing message; ``services/delivery/process``
claims it and makes at most one SMTP attempt (a batch of wake-ups together)."""
from __future__ import annotations

from chalicelib import queues
from chalicelib.services.delivery import process
from chalicelib.workers.registry import QueueWorker, register


def _process_batch(message_ids: list[int]) -> dict[int, str]:
    # Looked up at each call, so a test can watch the batches the stack hands over.
    return process.process_batch(message_ids)


register(QueueWorker(queues.DELIVERIES, process=process.process, find_due=process.find_due,
                     process_batch=_process_batch))
