"""Hardening under parallel load, through the real local HTTP listener: the login lockout
cannot be outrun by parallel guesses, and a burst of clients is queued, never reset."""
from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from sqlalchemy import select

from chalicelib.db.models import AuthEvent
from chalicelib.services.accounts import passwords
from tests.support.accounts import AUTH, PASSWORD, login, make_user, try_login
from tests.support import Api, all_tenants

PARALLEL_LOGINS = 50
BURST = 100


def _in_parallel(n: int, fn) -> list:
    """Run ``fn(i)`` in n threads released together (a barrier), so the requests overlap."""
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait()
        try:
            return fn(i)
        except requests.RequestException as exc:  # a reset or refused connection
            return exc

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(run, range(n)))


def _auth_events(user_id: int) -> list[AuthEvent]:
    with all_tenants() as db:
        return list(db.scalars(select(AuthEvent).where(AuthEvent.user_id == user_id)))


def test_parallel_wrong_logins_get_at_most_the_limit_of_password_checks(api, monkeypatch):
    limit = 5
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", str(limit))
    person = make_user(api, sign_in=False)
    checks = Counter()
    real_verify = passwords.verify

    def counting_verify(stored, password):
        checks["verify"] += 1
        return real_verify(stored, password)

    monkeypatch.setattr(passwords, "verify", counting_verify)
    answers = _in_parallel(PARALLEL_LOGINS, lambda i: try_login(api, person.email,
                                                                f"wrong password {i}"))
    assert not [a for a in answers if isinstance(a, Exception)], "a connection failed"
    codes = Counter((a.status_code, a.json()["error"]["code"]) for a in answers)
    assert set(codes) <= {(401, "InvalidCredentials"), (403, "AccountLocked")}, codes
    assert checks["verify"] <= limit, checks
    trail = _auth_events(person.id)
    wrong = [e for e in trail if e.details == "wrong password"]
    assert len(wrong) == checks["verify"] <= limit
    assert [e.event for e in trail].count("lockout") == 1
    assert codes[(403, "AccountLocked")] >= PARALLEL_LOGINS - limit + 1
    # The right password does not open the account either while it is locked.
    Api.error(try_login(api, person.email, PASSWORD), 403, "AccountLocked")


def test_the_last_allowed_attempt_with_the_right_password_logs_in(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "3")
    person = make_user(api, sign_in=False)
    for _ in range(2):
        Api.error(try_login(api, person.email, "wrong password"), 401, "InvalidCredentials")
    assert login(api, person.email, PASSWORD)["user"]["id"] == person.id
    # and it reset the count: two more failures still do not lock
    for _ in range(2):
        Api.error(try_login(api, person.email, "wrong password"), 401, "InvalidCredentials")
    login(api, person.email, PASSWORD)


def test_a_burst_of_clients_is_queued_not_reset(api, stack):
    assert stack.http._server.server.request_queue_size >= 128

    def call(i):
        # A fresh connection per client (no shared keep-alive pool), doing database work.
        with requests.Session() as http:
            return http.get(f"{stack.base_url}/api/v2/admin/organizations?per_page=1",
                            headers={"X-Admin-API-Key": api.admin_key}, timeout=120)

    answers = _in_parallel(BURST, call)
    failed = [a for a in answers if isinstance(a, Exception)]
    assert not failed, f"{len(failed)} of {BURST} connections failed: {failed[0]!r}"
    assert Counter(a.status_code for a in answers) == {200: BURST}


@pytest.mark.parametrize("path", [f"{AUTH}/login"])
def test_a_burst_of_logins_all_get_an_answer(api, stack, path, monkeypatch):
    # Cheap hashes: this is about the listener, not argon2's memory.
    monkeypatch.setenv("PASSWORD_HASH_MEMORY_KIB", "1024")
    monkeypatch.setenv("PASSWORD_HASH_TIME_COST", "1")
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "1000")
    person = make_user(api, sign_in=False)

    def call(i):
        with requests.Session() as http:
            return http.post(stack.base_url + path,
                             json={"email_address": person.email, "password": PASSWORD},
                             timeout=120)

    answers = _in_parallel(BURST, call)
    failed = [a for a in answers if isinstance(a, Exception)]
    assert not failed, f"{len(failed)} of {BURST} connections failed: {failed[0]!r}"
    assert Counter(a.status_code for a in answers) == {201: BURST}
