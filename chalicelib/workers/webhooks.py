"""Queue "webhooks": each wake-up names a WebhookRequest row; ``webhook_delivery.process``
claims it, POSTs it once and records the outcome; a batch of wake-ups goes through
``webhook_batch.process_batch`` (one transaction on PostgreSQL). Importing the webhooks service here also
registers its events listener in every worker process."""
from __future__ import annotations

from sqlalchemy.orm import Session

from chalicelib.db.models import WebhookRequest
from chalicelib.db import claims
from chalicelib.services.webhooks import batch as webhook_batch, deliver
from chalicelib.services.webhooks import hooks as _webhooks  # noqa: F401  (registers fan_out)
from chalicelib.workers.registry import QueueWorker, register


def find_due(db: Session, limit: int, grace_seconds: float) -> list[int]:
    return claims.due_ids(db, WebhookRequest, limit, grace_seconds)


register(QueueWorker(deliver.QUEUE, process=deliver.process, find_due=find_due,
                     process_batch=webhook_batch.process_batch))
