"""Failed SMTP AUTH attempts per client address: each failure slows the next answer, and
after SMTP_AUTH_MAX_FAILURES in the window AUTH from that address is refused outright, before
its key is looked up; a success clears the address's count. ``auth.authenticate`` does the
refusal and the clearing in the AUTH's own transaction (``failures``, ``clear``).

Counted in the database (``smtp_auth_failures``), not in a process: the network load balancer
spreads one guesser's connections over every gateway task, and a restart must not hand out a
fresh allowance. The window starts at an address's first failure; a failure after it has
passed starts a new one. These are blocking calls: the gateway runs them in its thread pool.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import case, delete, select
from sqlalchemy.orm import Session

from chalicelib import clock
from chalicelib.db import session_scope
from chalicelib.db.engine import upsert
from chalicelib.db.models import SmtpAuthFailure

MAX_DELAY_SECONDS = 10.0


class AuthFailureLimiter:
    def __init__(self, max_failures: int, window_seconds: float, delay_seconds: float):
        self.max_failures = max_failures
        self.window = timedelta(seconds=window_seconds)
        self.delay = delay_seconds

    def _window_start(self) -> datetime:
        return clock.now() - self.window

    def failures(self, db: Session, address: str) -> int:
        """Failures of ``address`` counted in the current window."""
        return db.scalar(select(SmtpAuthFailure.failures).where(
            SmtpAuthFailure.address == address,
            SmtpAuthFailure.window_started_at >= self._window_start())) or 0

    def record_failure(self, address: str) -> float:
        """Count a failure (one atomic upsert: concurrent failures from several tasks all
        count); returns how long to wait before answering it."""
        now, table = clock.now(), SmtpAuthFailure.__table__
        expired = table.c.window_started_at < self._window_start()
        with session_scope() as db:
            failures = db.scalar(
                upsert(db, SmtpAuthFailure)
                .values(address=address, failures=1, window_started_at=now, last_failure_at=now)
                .on_conflict_do_update(index_elements=["address"], set_={
                    "failures": case((expired, 1), else_=table.c.failures + 1),
                    "window_started_at": case((expired, now), else_=table.c.window_started_at),
                    "last_failure_at": now})
                .returning(table.c.failures))
        return min(self.delay * failures, MAX_DELAY_SECONDS)

    @staticmethod
    def clear(db: Session, address: str) -> None:
        """A successful AUTH forgets the address's failures (as Dovecot resets its per-IP
        penalty): a client that mistyped once is not left one failure from the limit."""
        db.execute(delete(SmtpAuthFailure).where(SmtpAuthFailure.address == address))
