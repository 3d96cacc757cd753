"""Helpers for webhook tests: events emitted straight into the queue."""
from __future__ import annotations
import pytest
from chalicelib import queues
from tests.webhooks.helpers import emit, make_message, queue_rows


def emit_events(tenant, hook_id: int, plan: list[tuple[int, str]]) -> list[int]:
    """Emit ``plan`` ((message index, event) in order) with the stack's wake-ups dropped, so
    only the test's batch delivers; returns the queue row ids in emission order."""
    messages: dict[int, int] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(queues, "_port", Dropped())
        for index, event in plan:
            if index not in messages:
                messages[index] = make_message(tenant)
            emit(messages[index], event)
    return sorted(row.id for row in queue_rows(hook_id))


class Dropped:
    def send(self, queue, body, delay_seconds=0):
        pass
