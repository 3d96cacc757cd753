"""`make run` on several processes (chalicelib/local/supervisor.py): the real
``python -m chalicelib.local`` with worker processes delivering through the shared queue to a
real MX and reporting to a real webhook receiver; a worker killed with SIGKILL mid-run is
restarted and logged, and costs nothing (no message sent twice, none lost); SIGINT stops
every child. The stack runs on a database of its own, so the suite's in-process stack (its
sweeper and workers) cannot take its rows."""
from __future__ import annotations

import os
import re
import signal
import smtplib

import pytest

from tests.processes import Stack, alive, message_ids, running, send_batches, sent_events
from tests.support import make_tenant, wait_for
from tests.support.webhooks import create_webhook


def _stops_every_child(stack: Stack) -> None:
    pids = [pid for started in stack.children().values() for pid in started]
    assert stack.interrupt() == 0, stack.lines[-20:]
    assert pids and not [pid for pid in pids if alive(pid)], stack.lines[-20:]
    # Each stopped by itself: a child whose signal handler hung (SIGINT, then the
    # supervisor's SIGTERM re-entering it) is killed after the grace period, and says so.
    assert not [line for line in stack.lines if "did not stop" in line], stack.lines[-20:]


@pytest.mark.postgres_only
def test_a_killed_worker_process_is_restarted_and_costs_no_message(tmp_path):
    with running(tmp_path, WORKER_PROCESSES="2", WORKER_THREADS="4") as (stack, mx, receiver):
        tenant = make_tenant(stack.api)
        create_webhook(stack.api, tenant, receiver.url)
        ids = send_batches(stack, tenant, 200)
        wait_for(lambda: len(mx.messages) >= 20, 60, message="deliveries under way")
        victim = stack.children()[("worker", 1)][0]
        os.kill(victim, signal.SIGKILL)
        # Every message ends Sent, or Held when the killed worker had already told the MX
        # DATA (its in-flight marker) but not yet recorded what the MX answered.
        wait_for(lambda: set((s := stack.statuses()).values()) <= {"Sent", "Held"}
                 and len(s) == len(ids), 120, 0.5, message="every message settled")
        statuses = stack.statuses()
        sent = [i for i in ids if statuses[i] == "Sent"]
        sent_headers = {header.strip("<> ") for _, status, header in stack.messages()
                        if status == "Sent"}
        wait_for(lambda: set(sent) <= set(sent_events(receiver)), 60, 0.2,
                 message="a MessageSent webhook for every message sent")
        restarted = stack.children()[("worker", 1)]
        assert len(restarted) >= 2 and restarted[0] == victim
        assert any(f"worker 1 (pid {victim}) killed by SIGKILL" in line
                   for line in stack.lines), stack.lines[-20:]
        _stops_every_child(stack)
    at_mx = message_ids(mx)
    assert max(at_mx.values()) == 1, [m for m, n in at_mx.items() if n > 1]  # none twice
    # None lost: at the MX once, or held (at most one per batch the dead worker was in).
    assert sent_headers <= set(at_mx)
    assert len(ids) - len(sent) <= 4, statuses  # WORKER_THREADS batches: one each at most


def test_worker_processes_deliver_on_sqlite_too(tmp_path):
    """With two HTTP and two SMTP processes on the shared ports too."""
    with running(tmp_path, sqlite=True, WORKER_PROCESSES="2", HTTP_PROCESSES="2",
                 SMTP_PROCESSES="2") as (stack, mx, receiver):
        tenant = make_tenant(stack.api)
        create_webhook(stack.api, tenant, receiver.url)
        ids = send_batches(stack, tenant, 60, per_request=20)
        wait_for(lambda: len(mx.messages) >= len(ids), 120, 0.2, message="every delivery")
        wait_for(lambda: set(ids) <= set(sent_events(receiver)), 60, 0.2,
                 message="a MessageSent webhook for every message")
        assert set(stack.statuses().values()) == {"Sent"}
        # Several processes write the file at once: they wait for each other, none fails.
        assert not [line for line in stack.lines if "database is locked" in line]
        # GET /metrics in either HTTP process counts what every worker sent.
        wait_for(lambda: _sent_total(stack) >= len(ids), 30, 0.2, message="metrics")
        assert {("worker", 2), ("http", 2), ("smtp", 2)} <= set(stack.children())
        assert any(line.startswith("processes    2 HTTP API, 2 SMTP gateway and 2 worker "
                                   "processes") for line in stack.lines)
        for _ in range(4):  # the kernel spreads connections over both gateway processes
            with smtplib.SMTP("127.0.0.1", stack.smtp_port, timeout=30) as client:
                assert client.ehlo()[0] == 250
        _stops_every_child(stack)
    assert sorted(message_ids(mx).values()) == [1] * len(ids)



def _sent_total(stack) -> float:
    text = stack.api.get("/metrics").text
    return float(re.search(r"^email_service_sent_total (\S+)$", text, re.MULTILINE).group(1))
