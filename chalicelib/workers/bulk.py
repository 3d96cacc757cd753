"""Queue "bulk": each wake-up names a bulk job; ``services/messages/bulk.process`` carries it
out in chunks."""
from __future__ import annotations

from chalicelib import queues
from chalicelib.services.messages import bulk
from chalicelib.workers.registry import QueueWorker, register

register(QueueWorker(queues.BULK, process=bulk.process, find_due=bulk.find_due))
