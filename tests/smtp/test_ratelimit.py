"""SMTP AUTH failure counting in the database: shared by every gateway task, atomic under
concurrent failures, windowed, cleared by a success and pruned by retention. Whether an
address is refused is asked of ``auth.authenticate``, as the gateway asks it."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.models import SmtpAuthFailure
from chalicelib.services.messages import retention
from chalicelib.smtp import auth
from chalicelib.smtp.ratelimit import MAX_DELAY_SECONDS, AuthFailureLimiter
from tests.support import all_tenants, unique

pytestmark = pytest.mark.usefixtures("database")


def _address() -> str:
    """A client address no other test uses (the column holds any peer string)."""
    return unique("peer")


def refused(limiter: AuthFailureLimiter, address: str) -> bool:
    """AUTH from ``address`` is refused before its key is looked at (a wrong key then gets
    the limit's 454, not 535; the answer counts nothing itself)."""
    return auth.authenticate(limiter, address, "not-a-key").reply == auth.TOO_MANY


def test_two_gateway_tasks_count_one_guesser_together():
    task_a, task_b = (AuthFailureLimiter(3, 900, 0.5) for _ in range(2))
    guesser = _address()
    assert task_a.record_failure(guesser) == 0.5
    assert task_b.record_failure(guesser) == 1.0  # the delay grows with the shared count
    assert not refused(task_a, guesser) and not refused(task_b, guesser)
    task_a.record_failure(guesser)
    assert refused(task_a, guesser) and refused(task_b, guesser)
    assert not refused(task_b, _address())  # others are not affected


def test_a_success_clears_and_the_delay_is_capped():
    limiter = AuthFailureLimiter(100, 900, 3.0)
    address = _address()
    delays = [limiter.record_failure(address) for _ in range(5)]
    assert delays[:3] == [3.0, 6.0, 9.0] and delays[3:] == [MAX_DELAY_SECONDS] * 2
    with all_tenants() as db:  # what a successful AUTH does (auth.authenticate)
        limiter.clear(db, address)
    assert limiter.record_failure(address) == 3.0


def test_the_window_starts_at_the_first_failure_and_then_starts_again():
    limiter = AuthFailureLimiter(2, 60, 0.1)
    address = _address()
    limiter.record_failure(address)
    limiter.record_failure(address)
    assert refused(limiter, address)
    clock.advance(timedelta(seconds=61))
    assert not refused(limiter, address)
    limiter.record_failure(address)  # a new window: counted from one
    assert not refused(limiter, address)


def test_concurrent_failures_are_all_counted():
    limiter = AuthFailureLimiter(1000, 900, 0.0)
    address = _address()
    threads = [threading.Thread(target=lambda: [limiter.record_failure(address)
                                                for _ in range(5)]) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with all_tenants() as db:
        assert db.scalar(select(SmtpAuthFailure.failures)
                         .where(SmtpAuthFailure.address == address)) == 30


def test_retention_prunes_spent_counts():
    limiter = AuthFailureLimiter(5, 900, 0.0)
    old, recent = _address(), _address()
    limiter.record_failure(old)
    clock.advance(timedelta(days=2))
    limiter.record_failure(recent)
    with all_tenants() as db:
        assert retention.prune(db)["smtp_auth_failures"] >= 1
    with all_tenants() as db:
        left = set(db.scalars(select(SmtpAuthFailure.address)
                              .where(SmtpAuthFailure.address.in_([old, recent]))))
    assert left == {recent}
