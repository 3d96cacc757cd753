"""The one function through which the sending pipeline reports what happened to a message.

``emit`` records the event on the message's history (GET .../messages/{id} shows it) and
hands it to every listener in the same transaction; the webhook service listens and writes
one queue row per subscribed webhook, so an event and its notifications commit together.
"""
from __future__ import annotations

import uuid
from typing import Callable

from sqlalchemy.orm import Session

from chalicelib.db.models import Message, MessageEvent

EVENTS = ("MessageSent", "MessageDelayed", "MessageDeliveryFailed", "MessageHeld")
# Recorded in a message's history only: the spec's webhooks have exactly the four above.
# MessageBounced / MessageComplained / MessageAuthFailureReported: a bounce, a feedback report
# or an authentication-failure report came back for it (services/inbound/return_path.py).
HISTORY_EVENTS = ("MessageCancelled", "MessageBounced", "MessageComplained",
                  "MessageAuthFailureReported")

Listener = Callable[[Session, Message, MessageEvent], None]
_listeners: list[Listener] = []

# Modules whose import registers a listener. They are imported on the first emit, so every
# process that emits (API, queue workers, the standalone SMTP gateway) notifies them.
LISTENER_MODULES = ["chalicelib.services.webhooks.payload"]
_loaded = False


def _load_listeners() -> None:
    global _loaded
    if not _loaded:
        import importlib

        for module in LISTENER_MODULES:
            importlib.import_module(module)
        _loaded = True


def add_listener(listener: Listener) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def emit(db: Session, message: Message, event: str, details: str) -> MessageEvent:
    if event not in EVENTS and event not in HISTORY_EVENTS:
        raise ValueError(f"unknown event {event}")
    _load_listeners()
    record = MessageEvent(message_id=message.id, server_id=message.server_id, event=event,
                          uuid=str(uuid.uuid4()), details=details)
    db.add(record)
    db.flush()
    if event in HISTORY_EVENTS:
        return record
    for listener in list(_listeners):
        listener(db, message, record)
    return record
