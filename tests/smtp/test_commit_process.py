"""The gateway's committer in a child process (SMTP_COMMIT_PROCESS, smtp/commit_process.py):
mail submitted over real sockets is committed there, what the units did beyond their rows
(queue wake-ups, metric counts, log lines) comes back to the gateway's process, refusals keep
their SMTP replies, a changed setting reaches the child, and a killed child loses nothing
that was answered 250: its held clients get 451, the gateway goes on in its own process and
starts another child."""
from __future__ import annotations

import io
import os
import signal
import smtplib

import pytest

from chalicelib import observability, queues
from chalicelib.db.models import Message
from tests.support.smtp import starttls_client
from tests.support import all_tenants, wait_for

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")


class RecordingPort:
    def __init__(self):
        self.sent: list[tuple[str, int]] = []

    def send(self, queue, body, delay_seconds=0):
        self.sent.append((queue, body["id"]))

    def send_many(self, queue, bodies, delays=None):
        self.sent.extend((queue, body["id"]) for body in bodies)


@pytest.fixture
def gateway(stack):
    from chalicelib.smtp.commit_process import CommitterProcess
    from chalicelib.smtp.gateway import Gateway

    gw = Gateway("127.0.0.1", 0, submission_ports=[], tls_port=None)
    assert isinstance(gw._committer, CommitterProcess)  # the default
    gw.start()
    assert gw._committer.wait_ready(60)
    yield gw
    gw.stop()


@pytest.fixture
def port():
    previous = queues.get_port()
    recording = RecordingPort()
    queues.set_port(recording)
    yield recording
    queues.set_port(previous)


@pytest.fixture
def local_units(gateway, monkeypatch):
    """The units the gateway's own committer took (none while the child is up)."""
    taken = []
    submit = gateway._committer.local.submit
    monkeypatch.setattr(gateway._committer.local, "submit",
                        lambda unit: taken.append(unit) or submit(unit))
    return taken


def mail(tenant, subject: str, sender: str | None = None) -> bytes:
    return (f"From: {sender or 'app@' + tenant.domain}\r\nTo: user@example.net\r\n"
            f"Subject: {subject}\r\n\r\nHello\r\n").encode()


def send(gateway, tenant, subject: str, sender: str | None = None):
    with starttls_client(gateway.port) as client:
        client.login("user", tenant.smtp_key)
        return client.sendmail(sender or f"app@{tenant.domain}", ["user@example.net"],
                               mail(tenant, subject, sender))


def stored(subject: str) -> list[Message]:
    with all_tenants() as db:
        return list(db.query(Message).filter(Message.subject == subject))


def test_submission_is_committed_in_the_child_and_its_side_effects_come_back(
        gateway, tenant, port, local_units):
    before = observability.counters()["accepted"]
    buffer = io.StringIO()
    restore = observability.capture(buffer)
    try:
        assert send(gateway, tenant, "through the child") == {}
    finally:
        restore()
    assert gateway._committer.pid not in (None, os.getpid())
    assert local_units == []  # not committed in the gateway's process
    [message] = stored("through the child")
    assert message.status == "Pending"
    assert ("deliveries", message.id) in port.sent  # the wake-up, sent from this process
    assert observability.counters()["accepted"] == before + 1
    assert '"submission.accepted"' in buffer.getvalue()  # the child's log line, written here
    assert f'"messages":[{message.id}]' in buffer.getvalue()


def test_refusals_keep_their_replies(gateway, tenant):
    with pytest.raises(smtplib.SMTPDataError) as refused:
        send(gateway, tenant, "not ours", sender="someone@not-verified.example")
    assert refused.value.smtp_code == 550  # From not authorized: 550 5.7.1, not 451
    assert b"5.7.1" in refused.value.smtp_error
    assert stored("not ours") == []


def test_a_changed_setting_reaches_the_child(gateway, tenant, monkeypatch):
    monkeypatch.setenv("LOG_FORMAT", "text")
    buffer = io.StringIO()
    restore = observability.capture(buffer)
    try:
        send(gateway, tenant, "text logs")
    finally:
        restore()
    [line] = [ln for ln in buffer.getvalue().splitlines() if "submission.accepted" in ln]
    assert not line.startswith("{") and "source=smtp" in line  # formatted by the child


def test_a_killed_child_loses_nothing_answered_and_is_replaced(gateway, tenant):
    first = gateway._committer.pid
    os.kill(first, signal.SIGKILL)
    accepted = []
    for attempt in range(20):  # as a client does: a 451 is sent again
        subject = f"after the kill {attempt}"
        try:
            send(gateway, tenant, subject)
        except smtplib.SMTPDataError as exc:
            assert exc.smtp_code == 451
            continue
        accepted.append(subject)
        if len(accepted) == 3:
            break
    assert len(accepted) == 3
    for subject in accepted:  # committed, in this process while no child answered
        assert len(stored(subject)) == 1
    wait_for(lambda: gateway._committer.pid not in (None, first)
             and gateway._committer.wait_ready(0), 60, message="a new committer process")
    send(gateway, tenant, "to the new child")
    assert len(stored("to the new child")) == 1


def test_stop_ends_the_child(stack):
    from chalicelib.smtp.gateway import Gateway

    gw = Gateway("127.0.0.1", 0, submission_ports=[], tls_port=None)
    gw.start()
    assert gw._committer.wait_ready(60)
    child = gw._committer._child
    gw.stop()
    assert child.poll() is not None


def test_off_commits_in_the_gateways_process(stack, tenant, monkeypatch):
    from chalicelib.smtp.commit import GroupCommitter
    from chalicelib.smtp.gateway import Gateway

    monkeypatch.setenv("SMTP_COMMIT_PROCESS", "false")
    gw = Gateway("127.0.0.1", 0, submission_ports=[], tls_port=None)
    assert type(gw._committer) is GroupCommitter
    gw.start()
    try:
        send(gw, tenant, "in process")
    finally:
        gw.stop()
    assert len(stored("in process")) == 1
