"""Helpers for the accounts and permissions tests: users made through the admin API, sign-in."""
from __future__ import annotations

from dataclasses import dataclass

from tests.support import Api, unique

ADMIN = "/api/v2/admin"
AUTH = "/api/v2/auth"
PASSWORD = "correct horse battery"


@dataclass
class Person:
    id: int
    email: str
    password: str
    token: str | None = None


def make_user(api: Api, *, admin: bool = False, password: str = PASSWORD,
              sign_in: bool = True) -> Person:
    email = f"{unique('u')}@example.com"
    user = Api.data(api.post(f"{ADMIN}/users", {"email_address": email, "first_name": "Test",
                                                 "last_name": "User", "password": password,
                                                 "admin": admin}), 201)["user"]
    person = Person(user["id"], email, password)
    if sign_in:
        person.token = login(api, email, password)["session_token"]
    return person


def login(api: Api, email: str, password: str, **extra) -> dict:
    return Api.data(api.post(f"{AUTH}/login", {"email_address": email, "password": password,
                                                **extra}), 201)


def try_login(api: Api, email: str, password: str, **extra):
    return api.post(f"{AUTH}/login", {"email_address": email, "password": password, **extra})


def events(api: Api, **query) -> list[dict]:
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return Api.data(api.get(f"{ADMIN}/auth_events?{params}"))["auth_events"]
