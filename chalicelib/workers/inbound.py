"""Queue "inbound": each wake-up names a received message; ``services/inbound/forward``
hands it to its route's endpoint."""
from __future__ import annotations

from chalicelib import queues
from chalicelib.services.inbound import forward
from chalicelib.workers.registry import QueueWorker, register

register(QueueWorker(queues.INBOUND, process=forward.process, find_due=forward.find_due))
