"""Two requests writing the same unique value at the same instant (db/unique.py): each looks
first and finds the value free, then the unique index decides. The loser gets the 422
ValidationError naming the field that the look would have given, never a 500, and exactly
one write survives. The requests are real HTTP requests to the running stack, held after
their look until both have looked, so they interleave the same way every run.

PostgreSQL only: SQLite's writers take the database lock at BEGIN, so they cannot interleave."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib.services.accounts import members, passwords, users
from chalicelib.services.dkim import keys as dkim_keys
from tests.support.accounts import ADMIN, AUTH, PASSWORD, make_user
from tests.conftest import TEST_DATABASE_URL
from tests.support import Api, unique

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                       reason="SQLite's writers take the lock at BEGIN: no two can interleave"),
]


def both_look_first(monkeypatch, module, name: str) -> None:
    """Hold each call of ``module.name`` (called after the request's look, or as it) until
    two requests have made it: neither writes before both have looked."""
    barrier = threading.Barrier(2, timeout=30)
    original = getattr(module, name)

    def held(*args, **kwargs):
        result = original(*args, **kwargs)
        barrier.wait()
        return result

    monkeypatch.setattr(module, name, held)


def race(*calls) -> list:
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def one_lost(answers, field: str) -> dict:
    """One answer won (2xx); the other is a 422 ValidationError naming ``field``."""
    codes = sorted(r.status_code for r in answers)
    assert codes[0] in (200, 201) and codes[1] == 422, [(r.status_code, r.text) for r in answers]
    error = next(r for r in answers if r.status_code == 422).json()["error"]
    assert (error["code"], error["field"]) == ("ValidationError", field), error
    return error


def test_two_users_changing_to_the_same_address(api, monkeypatch):
    first, second = make_user(api), make_user(api)
    wanted = f"{unique('wanted')}@example.com"
    both_look_first(monkeypatch, users, "find_by_email")
    answers = race(*(lambda p=p: api.patch(f"{AUTH}/me", {"email_address": wanted,
                                                         "current_password": PASSWORD},
                                           bearer=p.token) for p in (first, second)))
    error = one_lost(answers, "email_address")
    assert "already exists" in error["message"]
    owners = [Api.data(api.get(f"{AUTH}/me", bearer=p.token))["user"]["email_address"]
              for p in (first, second)]
    assert sorted(owners) == sorted([wanted, (second if owners[0] == wanted else first).email])


def test_two_accounts_created_for_one_address(api, monkeypatch):
    email = f"{unique('twice')}@example.com"
    both_look_first(monkeypatch, passwords, "hash_password")  # hashed after the look
    answers = race(*(lambda: api.post(f"{ADMIN}/users", {"email_address": email,
                                                         "password": PASSWORD})
                     for _ in range(2)))
    one_lost(answers, "email_address")


def test_one_person_added_to_an_organization_twice(api, tenant, monkeypatch):
    person = make_user(api, sign_in=False)
    both_look_first(monkeypatch, members, "membership_of")
    path = f"{ADMIN}/organizations/{tenant.org}/members"
    answers = race(*(lambda: api.post(path, {"user_id": person.id, "role": "member"})
                     for _ in range(2)))
    one_lost(answers, "user_id")
    listed = Api.data(api.get(path))["members"]
    assert [m["user_id"] for m in listed].count(person.id) == 1


def test_one_domain_added_twice(api, tenant, monkeypatch):
    name = f"{unique('twice')}.example.com"
    both_look_first(monkeypatch, dkim_keys, "generate")  # a new key is made after the look
    answers = race(*(lambda: api.post(f"{tenant.server_path}/domains", {"name": name})
                     for _ in range(2)))
    one_lost(answers, "name")
