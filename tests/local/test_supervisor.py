"""The supervisor's restarts (chalicelib/local/supervisor.py): a child that dies at once, again
and again, is started again after a doubling pause, not in a tight loop; each death is logged
with its exit code."""
from __future__ import annotations

import logging
import os

from chalicelib import queues
from chalicelib.config import get_settings
from chalicelib.local.supervisor import FIRST_PAUSE, Child, Supervisor, describe_exit
from tests.support import wait_for


def test_a_child_dying_at_start_is_restarted_after_growing_pauses(caplog):
    port = queues.get_port()
    supervisor = Supervisor(get_settings())
    # Not a kind child.py knows: it prints its usage and exits with 2, every time.
    child = Child("no-such-kind", 1, dict(os.environ))
    supervisor.children.append(child)
    child.start()
    pauses = []
    with caplog.at_level(logging.WARNING, logger="chalicelib.local.supervisor"):
        def three_deaths():
            supervisor.check()
            if child.restart_at is not None and (not pauses or child.restarts > len(pauses)):
                pauses.append(child.pause)
            return child.restarts >= 3

        wait_for(three_deaths, 60, 0.02, message="three restarts")
    supervisor.stop()
    # Never started, it leaves this process's queue port alone (the suite's stack uses it).
    assert queues.get_port() is port
    assert pauses == [FIRST_PAUSE, FIRST_PAUSE * 2, FIRST_PAUSE * 4]
    assert child.history == [2, 2, 2]
    assert "no-such-kind 1 (pid" in caplog.text and "exited with code 2" in caplog.text


def test_exits_are_described_by_code_or_signal():
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-9) == "killed by SIGKILL"
