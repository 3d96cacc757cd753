"""Properties that only show under pressure: equal work for unknown addresses, a TOTP code used
once even when sent in parallel, parallel wrong guesses all counted, reset tokens used once."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pyotp
from argon2 import PasswordHasher

from chalicelib import clock
from tests.support.accounts import ADMIN, AUTH, PASSWORD, login, make_user, try_login
from tests.support import Api, unique

PARALLEL = 6


def parallel(fn, n: int = PARALLEL) -> list:
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(lambda _: fn(), range(n)))


def test_unknown_addresses_cost_the_same_argon2_verification(api, monkeypatch):
    person = make_user(api, sign_in=False)
    sso_only = Api.data(api.post(f"{ADMIN}/users", {"email_address": f"{unique('s')}@example.com"}),
                        201)["user"]
    calls = []
    original = PasswordHasher.verify

    def counting(self, hash, password):  # noqa: A002
        calls.append(hash)
        return original(self, hash, password)

    monkeypatch.setattr(PasswordHasher, "verify", counting)
    for email in (f"{unique('nobody')}@example.com", person.email, sso_only["email_address"]):
        calls.clear()
        Api.error(try_login(api, email, "guess guess guess"), 401, "InvalidCredentials")
        assert len(calls) == 1 and calls[0].startswith("$argon2id$"), email


def test_a_totp_code_sent_in_parallel_signs_in_once(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "50")  # replays count toward the lockout
    person = make_user(api)
    secret = Api.data(api.post(f"{AUTH}/totp/enroll", bearer=person.token))["secret"]
    totp = pyotp.TOTP(secret)
    Api.data(api.post(f"{AUTH}/totp/activate", {"code": totp.at(clock.timestamp())},
                      bearer=person.token))
    clock.advance(timedelta(seconds=30))  # the next time step: a fresh code
    code = totp.at(clock.timestamp())
    answers = parallel(lambda: try_login(api, person.email, PASSWORD, totp_code=code))
    statuses = sorted(r.status_code for r in answers)
    assert statuses.count(201) == 1 and statuses.count(401) == PARALLEL - 1, statuses
    assert all(r.json()["error"]["code"] == "InvalidTOTPCode" for r in answers
               if r.status_code == 401)


def test_parallel_wrong_guesses_are_all_counted(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", str(PARALLEL))
    person = make_user(api, sign_in=False)
    answers = parallel(lambda: try_login(api, person.email, "wrong password"))
    codes = sorted(r.json()["error"]["code"] for r in answers)
    assert codes.count("AccountLocked") >= 1, codes
    Api.error(try_login(api, person.email, PASSWORD), 403, "AccountLocked")


def test_a_reset_token_redeemed_in_parallel_works_once(api):
    person = make_user(api, sign_in=False)
    token = Api.data(api.post(f"{ADMIN}/users/{person.id}/password_reset"),
                     201)["password_reset"]["reset_token"]
    answers = parallel(lambda: api.post(f"{AUTH}/password-reset/complete",
                                        {"token": token, "password": "parallel password"}))
    statuses = sorted(r.status_code for r in answers)
    assert statuses.count(200) == 1 and statuses.count(422) == PARALLEL - 1, statuses
    login(api, person.email, "parallel password")
