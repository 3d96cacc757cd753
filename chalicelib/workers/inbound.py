"""Queue "inbound": deliver a received message to its route's endpoint."""
from __future__ import annotations

from chalicelib.services import inbound
from chalicelib.workers.registry import QueueWorker, register

register(QueueWorker(inbound.QUEUE, process=inbound.process, find_due=inbound.find_due))
