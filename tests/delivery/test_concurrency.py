"""Many SMTP conversations at once, with fewer round trips (concurrency.py, sessions.py,
pipelining.py), through real sockets: PIPELINING against an MX that offers it (seen in one
flight through a counting proxy) and one that does not, a recipient refused inside a
pipelined flight, a session dropped mid-flight, a destination's connection limit held at the
MX under load (idle sessions included), destinations delivered side by side, and a worker
killed (SIGKILL) mid-batch sending nothing twice."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from chalicelib import queues
from chalicelib.services.delivery import pacing, process as worker, client as smtp_client
from tests.support.delivery import DroppedQueue, park_many
from tests.support.delivery import deliveries_of, make_due, park_message
from tests.mx import ScriptedMX
from tests.support.sending import wait_status
from tests.support import unique, wait_for

DATA = b"From: a@example.com\r\nSubject: x\r\n\r\nhi\r\n"


class CountingProxy:
    """A TCP proxy in front of an MX that keeps each chunk the client wrote as it arrived:
    commands sent in one flight arrive in one chunk (loopback, one write)."""

    def __init__(self, port: int):
        self.target = port
        self.chunks: list[bytes] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False),
                             daemon=True).start()

    def _pipe(self, source, sink, from_client: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_client:
                    self.chunks.append(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def proxied():
    mx = ScriptedMX().start()
    proxy = CountingProxy(mx.port)
    yield mx, proxy
    smtp_client.close_cached()
    proxy.close()
    mx.stop()


def test_pipelining_sends_mail_rcpt_and_data_in_one_flight(proxied):
    mx, proxy = proxied
    hosts = [("127.0.0.1", proxy.port)]
    marks = []
    for n in range(2):
        outcome = smtp_client.send(hosts, mail_from="rp@rp.test", rcpt_to=f"u{n}@example.org",
                            data=DATA, before_data=marks.append)
        assert outcome.status == smtp_client.SENT, outcome.details
    assert len(mx.messages) == 2 and mx.connections == 1 and len(marks) == 2
    flights = [c for c in proxy.chunks if b"MAIL FROM" in c]
    assert len(flights) == 2
    for flight in flights:  # one write, one chunk: MAIL, RCPT and DATA together
        assert flight.count(b"\r\n") == 3 and b"RCPT TO:" in flight and b"DATA\r\n" in flight
    # the content went on its own, after the 354 (and the caller's marker)
    assert any(c.startswith(b"From: a@example.com") for c in proxy.chunks)


def test_without_pipelining_each_command_waits_for_its_reply():
    mx = ScriptedMX(pipelining=False).start()
    proxy = CountingProxy(mx.port)
    try:
        outcome = smtp_client.send([("127.0.0.1", proxy.port)], mail_from="rp@rp.test",
                            rcpt_to="u@example.org", data=DATA)
        assert outcome.status == smtp_client.SENT, outcome.details
        commands = [c.upper() for c in proxy.chunks
                    if c.upper().startswith((b"MAIL", b"RCPT", b"DATA"))]
        assert [c.split(b" ")[0].split(b"\r")[0] for c in commands] == \
            [b"MAIL", b"RCPT", b"DATA"]
        assert all(c.count(b"\r\n") == 1 for c in commands)
        assert len(mx.messages) == 1
    finally:
        smtp_client.close_cached()
        proxy.close()
        mx.stop()


def test_a_recipient_refused_inside_a_flight_and_the_session_goes_on(proxied):
    mx, proxy = proxied
    hosts = [("127.0.0.1", proxy.port)]
    mx.script = ["rcpt:550 5.1.1 no such user", "rcpt:452 4.2.2 mailbox full"]
    marks = []
    refused = smtp_client.send(hosts, mail_from="rp@rp.test", rcpt_to="gone@example.org", data=DATA,
                        before_data=marks.append)
    assert refused.status == smtp_client.HARD and refused.code == 550 and refused.recipient_rejected
    assert refused.stage == "envelope" and "the recipient" in refused.details
    deferred = smtp_client.send(hosts, mail_from="rp@rp.test", rcpt_to="full@example.org", data=DATA,
                         before_data=marks.append)
    assert deferred.status == smtp_client.SOFT and deferred.code == 452
    sent = smtp_client.send(hosts, mail_from="rp@rp.test", rcpt_to="ok@example.org", data=DATA,
                     before_data=marks.append)
    assert sent.status == smtp_client.SENT, sent.details
    assert marks == [sent.host]  # no marker for a refused transaction: nothing was sent
    assert mx.connections == 1  # the same session, reset (RSET) after each refusal
    assert sum(c.upper().startswith(b"RSET") for c in proxy.chunks) == 2
    assert [m.rcpt_tos for m in mx.messages] == [["ok@example.org"]]


def test_a_session_dropped_mid_flight_sends_nothing_twice(api, tenant, mx, db):
    # 1st: on a fresh session, the MX drops it when the pipelined RCPT arrives: SoftFail,
    # retried. 2nd and 3rd go on another session; the 3rd's RCPT is dropped: that session was
    # reused, so nothing of the message was delivered and it goes on a fresh one at once.
    domain = f"{unique('drop')}.example"
    ids, addresses = park_many(db, api, tenant, 3, [f"{unique('d')}@{domain}" for _ in range(3)])
    mx.script = ["rcpt:drop", "250", "rcpt:drop"]
    results = worker.process_batch(ids)
    assert [results[i] for i in ids] == ["SoftFail", "Sent", "Sent"]
    assert mx.drops == 2 and mx.connections == 3
    assert [[d.status for d in deliveries_of(i)] for i in ids] == \
        [["SoftFail"], ["Sent"], ["Sent"]]
    wait_status(api, tenant, ids[0], "Sent")  # its retry
    assert [len(mx.received_for(to)) for to in addresses] == [1, 1, 1]


def test_a_destinations_connection_limit_holds_at_the_mx_idle_sessions_included(
        api, tenant, mx, db, monkeypatch):
    monkeypatch.setenv("DELIVERY_SESSION_IDLE_SECONDS", "30")  # idle sessions stay open
    domain, name = f"{unique('two')}.example", unique("two")
    monkeypatch.setenv("DELIVERY_PACING_RULES",
                       f'[{{"name": "{name}", "domains": ["{domain}"], "connections": 2}}]')
    ids, addresses = park_many(db, api, tenant, 24, [f"{unique('l')}@{domain}" for _ in range(24)])
    # Six workers take four wake-ups each at once; those finding both slots taken are paced
    # (the stack's workers send them when they are due again).
    batches = [ids[n::6] for n in range(6)]
    threads = [threading.Thread(target=worker.process_batch, args=(b,)) for b in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for message_id in ids:
        wait_status(api, tenant, message_id, "Sent", timeout=60)
    assert [len(mx.received_for(to)) for to in addresses] == [1] * 24
    assert mx.peak_open <= 2  # never more than the limit open at once, idle ones included
    assert mx.open_now >= 1   # an idle session was kept (with its slot) after the runs
    assert mx.connections < 24  # sessions were reused across runs
    pacing.release_idle(everything=True)
    wait_for(lambda: mx.open_now == 0, message="idle sessions closed")


def test_destinations_are_delivered_side_by_side(api, tenant, mx, db):
    # Five destinations in one batch: each DATA waits at the MX until five conversations are
    # in DATA at once, which only happens when they run side by side.
    mx.meet_in_data(5)
    addresses = [f"{unique('c')}@{unique('side')}.example" for _ in range(5) for _ in range(2)]
    ids, addresses = park_many(db, api, tenant, 10, addresses)
    results = worker.process_batch(ids)
    assert set(results.values()) == {"Sent"}
    assert mx.peak_in_data >= 5
    assert [len(mx.received_for(to)) for to in addresses] == [1] * 10


def test_one_destinations_messages_go_side_by_side_when_its_round_trips_are_long(
        api, tenant, mx, db, monkeypatch):
    # A batch to one domain goes over one session, one message after another, while its
    # round trips are short (loopback). To a domain whose round trips were seen to take
    # 30 ms (EHLO, the pipelined flight), a batch's messages are spread over several
    # sessions at once: each DATA waits at the MX until four conversations are in DATA
    # together. The connection limit still holds at the MX.
    monkeypatch.setenv("DELIVERY_PACING_CONNECTIONS", "6")
    monkeypatch.setenv("WORKER_PROCESSES", "1")  # this process's share: all six

    def batch(domain: str, count: int) -> list[str]:
        ids, addresses = park_many(db, api, tenant, count,
                                   [f"{unique('f')}@{domain}" for _ in range(count)])
        assert set(worker.process_batch(ids).values()) == {"Sent"}
        pacing.release_idle(everything=True)
        return addresses

    near = f"{unique('near')}.example"
    batch(near, 1)  # a session there: its round trip seen (short)
    before = mx.connections
    batch(near, 4)
    assert mx.connections - before == 1  # one session for the batch
    far = f"{unique('far')}.example"
    mx.delay = 0.03
    batch(far, 1)  # a session there: 30 ms seen, twice
    before = mx.connections
    mx.meet_in_data(4)
    addresses = batch(far, 12)
    assert mx.peak_in_data >= 4  # side by side
    assert 4 <= mx.connections - before <= 6  # a session a run, the limit kept
    assert mx.peak_open <= 6
    assert [len(mx.received_for(to)) for to in addresses] == [1] * 12


_KILLED_WORKER = """
import sys
from chalicelib.services.delivery import process
print("ready", flush=True)
ids = [int(i) for i in sys.stdin.readline().split()]
process.process_batch(ids)
"""


def test_a_worker_killed_mid_batch_sends_nothing_twice(api, tenant, mx, db, monkeypatch):
    # A worker process delivering a batch to four destinations on two I/O threads is killed
    # (SIGKILL) while one message is in DATA at the MX and others are on their way.
    monkeypatch.setenv("DELIVERY_CONCURRENCY", "2")
    domains = [f"{unique('kill')}.example" for _ in range(4)]
    addresses = [f"{unique('k')}@{d}" for d in domains for _ in range(3)]
    with pytest.MonkeyPatch.context() as patch:  # only the test's worker wakes them
        patch.setattr(queues, "_port", DroppedQueue())
        ids = [park_message(db, api, tenant, to) for to in addresses]
    arrived, release = mx.hold_next_data()
    child = subprocess.Popen([sys.executable, "-c", _KILLED_WORKER], env=dict(os.environ),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        for message_id in ids:  # due now (the child claims them at once)
            make_due(message_id)
        child.stdin.write(" ".join(map(str, ids)) + "\n")
        child.stdin.flush()
        assert arrived.wait(60)  # a message's content is at the MX; its reply is held
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        release.set()  # the MX accepts it: the dead worker never learns
        if child.poll() is None:
            child.kill()
    from tests.support.delivery import kill_and_recover

    shown = kill_and_recover(api, tenant, mx, ids, addresses)
    for to, shown_message in zip(addresses, shown):
        received = len(mx.received_for(to))
        assert received <= 1  # never twice
        if shown_message["status"] == "Sent":
            assert received == 1
        else:  # its outcome died with the worker: held for review, not resent
            assert "unknown" in shown_message["status_details"]
    assert any(m["status"] == "Held" for m in shown)  # the one in DATA at the kill


def test_local_workers_take_many_delivery_wakeups_at_once(monkeypatch):
    monkeypatch.setenv("DELIVERY_BATCH_SIZE", "50")
    schedule = queues.Schedule()
    schedule.push_many(queues.DELIVERIES, [f"d{n}" for n in range(60)], None)
    schedule.push_many(queues.WEBHOOKS, [f"w{n}" for n in range(20)], None)
    limits = queues.LocalPort.batch_limits()
    queue, taken = schedule.take(10, 0, limits=limits)
    assert queue == queues.DELIVERIES and len(taken) == 50
    assert schedule.take(10, 0, limits=limits)[1] == [f"d{n}" for n in range(50, 60)]
    assert len(schedule.take(10, 0, limits=limits)[1]) == 10  # other queues: 10


def test_the_pool_runs_a_batch_side_by_side_within_its_width_and_waits_for_every_task(
        monkeypatch):
    """``run_all``: the tasks run at once, never more than DELIVERY_CONCURRENCY of them (two
    batches together included), their results in order; one task's error is raised once the
    others have ended, their work kept."""
    from chalicelib.services.delivery import concurrency

    monkeypatch.setenv("DELIVERY_CONCURRENCY", "4")
    lock, running, peak, ended = threading.Lock(), [0], [0], []
    both = threading.Barrier(4)  # the first four tasks meet: they run at once

    def task(n: int, fail: bool = False):
        def run():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                if n < 4:
                    both.wait(timeout=30)
                if fail:
                    raise KeyError(n)
                return n * 10
            finally:
                with lock:
                    running[0] -= 1
                    ended.append(n)
        return run

    results: list = []
    other = threading.Thread(target=lambda: results.append(
        concurrency.run_all([task(n) for n in range(4, 10)])))
    other.start()
    assert concurrency.run_all([task(n) for n in range(4)]) == [0, 10, 20, 30]
    other.join()
    assert results == [[40, 50, 60, 70, 80, 90]] and peak[0] <= 4
    ended.clear()
    with pytest.raises(KeyError):
        concurrency.run_all([task(10), task(11, fail=True), task(12)])
    assert sorted(ended) == [10, 11, 12]
