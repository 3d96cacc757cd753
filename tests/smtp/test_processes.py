"""More than one gateway on one port (``Gateway(reuse_port=True)``: every listener bound with
SO_REUSEPORT, as N gateway processes are), and the group committer's prepare thread."""
from __future__ import annotations

import smtplib
import threading

import pytest

from chalicelib import errors
from chalicelib.smtp.commit import GroupCommitter, GroupUnit
from chalicelib.smtp.gateway import Gateway
from tests.support.smtp import simple_mail, starttls_client
from tests.support import free_port

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")


def _submit(port: int, tenant, subject: str) -> tuple[int, bytes]:
    sender = f"app@{tenant.domain}"
    with starttls_client(port) as client:
        client.login("u", tenant.smtp_key)
        client.mail(sender)
        client.rcpt("user@example.com")
        return client.data(simple_mail(sender, "user@example.com", subject))


def test_gateways_with_reuse_port_share_every_port(stack, tenant, monkeypatch):
    port, relay_port = free_port(), free_port()
    monkeypatch.setenv("OUTBOUND_RELAY_PORT", str(relay_port))
    gateways = [Gateway("127.0.0.1", port, submission_ports=[], tls_port=None, reuse_port=True)
                for _ in range(2)]
    try:
        for gateway in gateways:
            gateway.start()  # the second binds the same ports instead of failing
        assert [g.port for g in gateways] == [port, port]
        assert [g.relay.port for g in gateways] == [relay_port, relay_port]
        code, reply = _submit(port, tenant, "Through either")
        assert code == 250 and b"queued as" in reply
        gateways[0].stop()  # the port and the relay's are still served, by the other one
        code, reply = _submit(port, tenant, "Through the second")
        assert code == 250 and b"queued as" in reply
        with smtplib.SMTP("127.0.0.1", relay_port, timeout=10) as client:
            assert client.ehlo("probe.test")[0] == 250
    finally:
        for gateway in gateways:
            gateway.stop()


def test_without_reuse_port_a_second_gateway_cannot_bind_the_port(stack):
    port = free_port()
    first = Gateway("127.0.0.1", port, submission_ports=[], tls_port=None)
    second = Gateway("127.0.0.1", port, submission_ports=[], tls_port=None)
    first.start()
    try:
        with pytest.raises(OSError):
            second.start()
    finally:
        second.stop()
        first.stop()


class _Unit(GroupUnit):
    group = "test"
    ran: list = []

    def __init__(self, refuse: bool):
        self.refuse = refuse
        self.prepared_in = None

    def prepare(self) -> None:
        self.prepared_in = threading.current_thread().name
        if self.refuse:
            raise errors.ValidationError("refused in prepare")

    @classmethod
    def run_group(cls, db, units):
        cls.ran.extend(units)
        return [threading.current_thread().name for _ in units]


def test_units_are_prepared_in_the_prepare_thread_and_a_refusal_is_never_committed(database):
    committer = GroupCommitter()
    try:
        accepted, refused = _Unit(False), _Unit(True)
        ok, bad = committer.submit(accepted), committer.submit(refused)
        assert ok.result(30).startswith("smtp-commit")
        with pytest.raises(errors.ValidationError):
            bad.result(30)
    finally:
        committer.stop()
    assert accepted.prepared_in == refused.prepared_in == "smtp-prepare"  # once, not again
    assert _Unit.ran == [accepted]


class _Held(GroupUnit):
    """A unit whose prepare (``prepare_gate``) or transaction (``commit_gate``) waits for the
    test, so others queue behind it."""

    group = "held"

    def __init__(self, refuse: bool = False):
        self.refuse = refuse
        self.preparing, self.prepare_gate = threading.Event(), threading.Event()
        self.committing, self.commit_gate = threading.Event(), threading.Event()

    def prepare(self) -> None:
        self.preparing.set()
        assert self.prepare_gate.wait(30)
        if self.refuse:
            raise errors.ValidationError("refused in prepare")

    @classmethod
    def run_group(cls, db, units):
        for unit in units:
            unit.committing.set()
            assert unit.commit_gate.wait(30)
        return ["stored"] * len(units)


def test_a_client_gone_before_its_answer_never_costs_the_others_theirs(database):
    """aiosmtpd cancels a disconnected client's handler and so its future: answering that
    future must neither fail the rest of its batch (their mail is stored) nor stop the
    prepare thread."""
    committer = GroupCommitter()
    try:
        # Refused in prepare, its client gone meanwhile: the prepare thread carries on.
        refused = _Held(refuse=True)
        gone = committer.submit(refused)
        assert refused.preparing.wait(30)
        assert gone.cancel()
        refused.prepare_gate.set()
        assert committer.submit(_Unit(False)).result(30).startswith("smtp-commit")

        # A batch with a gone client in it: everyone else still gets the commit's answer.
        blocker = _Held()
        blocker.prepare_gate.set()
        first = committer.submit(blocker)
        assert blocker.committing.wait(30)  # the committer is held in this transaction
        queued = [_Unit(False) for _ in range(3)]
        futures = [committer.submit(unit) for unit in queued]
        while not all(unit.prepared_in for unit in queued):  # all prepared, waiting
            threading.Event().wait(0.01)
        threading.Event().wait(0.1)  # and queued (prepare returned): one batch after the blocker
        assert futures[0].cancel()
        blocker.commit_gate.set()
        assert first.result(30) == "stored"
        assert all(f.result(30).startswith("smtp-commit") for f in futures[1:])
    finally:
        committer.stop()
