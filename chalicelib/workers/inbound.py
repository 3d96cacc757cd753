"""Queue "inbound": deliver a received message to its route's endpoint."""
from __future__ import annotations

from chalicelib.services.inbound import receive
from chalicelib.workers.registry import QueueWorker, register

register(QueueWorker(receive.QUEUE, process=receive.process, find_due=receive.find_due))
