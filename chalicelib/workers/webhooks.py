"""Queue "webhooks": each wake-up names a WebhookRequest row; ``services/webhooks/deliver``
claims it, POSTs it once and records the outcome (a batch of wake-ups: ``batch.py``)."""
from __future__ import annotations

from chalicelib import queues
from chalicelib.services.webhooks import batch, deliver
from chalicelib.workers.registry import QueueWorker, register

register(QueueWorker(queues.WEBHOOKS, process=deliver.process, find_due=deliver.find_due,
                     process_batch=batch.process_batch))
