"""Failed SMTP AUTH attempts per client address: each failure slows the next answer, and
after SMTP_AUTH_MAX_FAILURES in the window AUTH from that address is refused outright.

Kept in the gateway process's memory: the gateway is a long-lived service (one container per
instance), and a restart forgetting counts only grants a guesser another few attempts."""
from __future__ import annotations

import threading
import time
from collections import deque


class AuthFailureLimiter:
    def __init__(self, max_failures: int, window_seconds: float, delay_seconds: float,
                 clock=time.monotonic):
        self.max_failures = max_failures
        self.window = window_seconds
        self.delay = delay_seconds
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, address: str) -> deque[float]:
        stamps = self._failures.get(address)
        if stamps is None:
            return deque()
        cutoff = self._clock() - self.window
        while stamps and stamps[0] < cutoff:
            stamps.popleft()
        if not stamps:
            self._failures.pop(address, None)
        return stamps

    def blocked(self, address: str) -> bool:
        with self._lock:
            return len(self._recent(address)) >= self.max_failures

    def record_failure(self, address: str) -> float:
        """Count a failure; returns how long to wait before answering it."""
        with self._lock:
            stamps = self._recent(address)
            stamps.append(self._clock())
            self._failures[address] = stamps
            if len(self._failures) > 100_000:  # bound memory under a spray of addresses
                self._failures.pop(next(iter(self._failures)))
            return min(self.delay * len(stamps), 10.0)

    def record_success(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)
