"""Ctrl-C and SIGTERM as a stop request, for the supervisor and its children."""
from __future__ import annotations

import signal
import time

# How often a waiting main thread wakes to run a pending signal handler.
POLL_SECONDS = 0.2


class StopRequest:
    """Set by SIGINT or SIGTERM; waited on like a ``threading.Event``.

    Not an Event, for two reasons seen as children that hung until the supervisor killed them:
    Python runs a handler only when the main thread runs bytecode, and the kernel may hand
    the signal to another thread (a worker blocked in a socket read), so a main thread
    blocked in ``Event.wait()`` or ``Thread.join()`` without a timeout never runs it; and a
    handler calling ``Event.set`` can re-enter the Event's lock when a second signal (Ctrl-C
    reaches the whole process group, then the supervisor sends SIGTERM) arrives while the main
    thread holds it. So the handler sets a plain flag, and waits sleep in short slices."""

    def __init__(self):
        self._requested = False

    def install(self) -> "StopRequest":
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, *_) -> None:
        self._requested = True

    def set(self) -> None:
        self._requested = True

    def is_set(self) -> bool:
        return self._requested

    def wait(self, timeout: float | None = None) -> bool:
        """True once a stop was requested; False after ``timeout`` seconds (None: never)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._requested:
            left = POLL_SECONDS if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_SECONDS, left))
        return True
