"""Helpers for delivery tests that drive the worker themselves: messages parked out of the
stack's reach (park_message, park_settled, park_many), made due on cue, their delivery rows, a
queue that drops wake-ups, a worker stopped dead (WorkerDied) and the recovery after it."""
from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from chalicelib import clock, queues
from chalicelib.db.models import Delivery, Message
from chalicelib.services.sending import submission
from tests.support import all_tenants, unique, wait_for
from tests.support.sending import message, rcpt
from tests.support.smtp import starttls_client


def park_message(db, api, tenant, to: str) -> int:
    """Submit through the service with next_attempt_at far ahead, so the stack's own workers
    leave the row alone until the test makes it due."""
    with all_tenants() as session:
        from chalicelib.db.models import Server
        from chalicelib.services.organizations import credentials

        srv = credentials.authenticate_key(session, tenant.api_key, "API").server
        request = type("R", (), dict(from_=f"app@{tenant.domain}", to=[to], cc=None, bcc=None,
                                     reply_to=None, subject="parked", text_body="x",
                                     html_body=None, headers=None, attachments=None, tag=None,
                                     metadata=None, stream=None))()
        result = submission.submit(session, session.get(Server, srv.id), request)
        message_id = result["recipients"][0]["id"]
        session.flush()
        session.execute(update(Message).where(Message.id == message_id)
                        .values(next_attempt_at=clock.now() + timedelta(days=365)))
    return message_id


def park_settled(db, api, tenant, to: str, monkeypatch) -> int:
    """``park_message``, then wait until the submission's own wake-up has reached a stack worker (which
    finds the row early and puts it back for later): else that worker could claim the row once
    the test makes it due."""
    put_back: set[int] = set()
    real_enqueue = queues.enqueue_after_commit

    def spy(session, queue, row_id, delay_seconds=0):
        if queue == queues.DELIVERIES and delay_seconds > 0:
            put_back.add(row_id)
        return real_enqueue(session, queue, row_id, delay_seconds)

    monkeypatch.setattr(queues, "enqueue_after_commit", spy)
    message_id = park_message(db, api, tenant, to)
    wait_for(lambda: message_id in put_back, message="the stack's early wake-up")
    monkeypatch.setattr(queues, "enqueue_after_commit", real_enqueue)
    return message_id


def make_due(message_id: int) -> None:
    with all_tenants() as session:
        session.execute(update(Message).where(Message.id == message_id)
                        .values(next_attempt_at=clock.now()))


def park_due(db, api, tenant, domain: str, count: int, prefix: str = "p") -> list[int]:
    """``count`` messages to ``domain`` parked, then made due (the test's own calls deliver)."""
    ids = [park_message(db, api, tenant, f"{unique(f'{prefix}{i}')}@{domain}")
           for i in range(count)]
    for message_id in ids:
        make_due(message_id)
    return ids


def message_row(message_id: int) -> Message:
    """The message's row as it is now, detached from its session."""
    with all_tenants() as session:
        row = session.get(Message, message_id)
        session.expunge(row)
        return row


def deliveries_of(message_id: int) -> list[Delivery]:
    with all_tenants() as session:
        return list(session.scalars(select(Delivery).where(Delivery.message_id == message_id)
                                    .order_by(Delivery.id)))


class WorkerDied(BaseException):
    """Raised to stop a worker dead: nothing after it runs, as with SIGKILL."""


class DroppedQueue:
    def send(self, queue, body, delay_seconds=0):
        pass


def park_many(db, api, tenant, count: int, addresses: list[str] | None = None
            ) -> tuple[list[int], list[str]]:
    """Due messages that only the test's own batch will wake (their submission's wake-ups
    are dropped, so the stack's workers cannot race the test for them)."""
    addresses = addresses or [rcpt(f"batch{i}") for i in range(count)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(queues, "_port", DroppedQueue())
        ids = [park_message(db, api, tenant, to) for to in addresses]
    for message_id in ids:
        make_due(message_id)
    return ids, addresses


def kill_and_recover(api, tenant, mx, ids, addresses):
    """After the kill: wait for the claims to expire; the sweeper wakes every row again."""
    clock.advance(timedelta(seconds=2000))
    for message_id in ids:
        wait_for(lambda: message(api, tenant, message_id)["status"] in ("Sent", "Held"),
                 timeout=20, message=f"message {message_id} done")
    return [message(api, tenant, i) for i in ids]


BODY = "Grüße aus Köln: schöne Äpfel\r\n"


def submit_8bit(stack, tenant, to: str) -> None:
    """An SMTP submission with an 8-bit body (kept as submitted by the gateway)."""
    data = (f"From: App <app@{tenant.domain}>\r\nTo: {to}\r\nSubject: Hello\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Transfer-Encoding: 8bit\r\n\r\n" + BODY).encode("utf-8")
    with starttls_client(stack.smtp_port) as client:
        client.login("x", tenant.smtp_key)
        assert client.sendmail(f"app@{tenant.domain}", [to], data,
                               mail_options=["BODY=8BITMIME"]) == {}
