"""Passkeys over HTTP with a software authenticator (tests/accounts/authenticator.py):
registering (behind the password), signing in with a passkey alone (user verification
required) or as the second factor after the password, replays, clones, other origins and
other accounts refused, renaming and removing, and the audit trail of each."""
from __future__ import annotations

from datetime import timedelta

import pyotp

from chalicelib import clock
from tests.accounts.authenticator import SoftAuthenticator
from tests.support.accounts import AUTH, PASSWORD, events, login, make_user, try_login
from tests.support import Api

PASSKEYS = f"{AUTH}/passkeys"


def register(api: Api, person, authenticator: SoftAuthenticator, name: str | None = None) -> dict:
    begun = Api.data(api.post(f"{PASSKEYS}/registration/options", {"password": person.password},
                              bearer=person.token))
    body = {"ceremony": begun["ceremony"], "credential": authenticator.create(begun["options"])}
    if name:
        body["name"] = name
    return Api.data(api.post(PASSKEYS, body, bearer=person.token), 201)["passkey"]


def sign_in_options(api: Api, **body) -> dict:
    return Api.data(api.post(f"{PASSKEYS}/login/options", body))


def answer(api: Api, begun: dict, authenticator: SoftAuthenticator, **kw):
    return api.post(f"{PASSKEYS}/login", {"ceremony": begun["ceremony"],
                                          "credential": authenticator.get(begun["options"], **kw)})


def test_register_then_sign_in_with_the_passkey_alone(api):
    person = make_user(api)
    key = SoftAuthenticator(api.base_url)
    begun = Api.data(api.post(f"{PASSKEYS}/registration/options", {"password": PASSWORD},
                              bearer=person.token))
    options = begun["options"]
    # The console's host (PUBLIC_URL here): a loopback address is named localhost, since
    # browsers refuse an IP address as the relying-party id.
    assert options["rp"]["id"] == "localhost"
    assert options["user"]["name"] == person.email
    assert options["authenticatorSelection"]["residentKey"] == "required"
    created = Api.data(api.post(PASSKEYS, {"ceremony": begun["ceremony"], "name": "Laptop",
                                           "credential": key.create(options)},
                                bearer=person.token), 201)["passkey"]
    assert created["name"] == "Laptop" and created["last_used_at"] is None
    # The ceremony is spent: the same answer cannot register twice.
    Api.error(api.post(PASSKEYS, {"ceremony": begun["ceremony"], "credential": key.create(options)},
                       bearer=person.token), 422, "InvalidToken")
    listed = Api.data(api.get(PASSKEYS, bearer=person.token))["passkeys"]
    assert [p["id"] for p in listed] == [created["id"]]

    begun = sign_in_options(api)
    assert begun["options"]["userVerification"] == "required"
    assert begun["options"].get("allowCredentials", []) == []  # the browser offers its own
    session = Api.data(answer(api, begun, key), 201)
    assert session["user"]["id"] == person.id and session["session_token"]
    me = Api.data(api.get(f"{AUTH}/me", bearer=session["session_token"]))
    assert me["user"]["email_address"] == person.email
    assert Api.data(api.get(PASSKEYS, bearer=person.token))["passkeys"][0]["last_used_at"]
    # A replayed answer finds its ceremony used up.
    again = api.post(f"{PASSKEYS}/login", {"ceremony": begun["ceremony"],
                                           "credential": key.get(begun["options"])})
    Api.error(again, 422, "InvalidToken")

    logins = [e for e in events(api, user_id=person.id, event="login")]
    assert logins[0]["details"] == f"passkey {created['id']} (Laptop)"
    assert [e["success"] for e in events(api, user_id=person.id, event="passkey_registered")] \
        == [True]


def test_sign_in_refuses_what_does_not_hold(api):
    person = make_user(api)
    key = SoftAuthenticator(api.base_url)
    register(api, person, key)
    # No user verification: not enough to sign in with the passkey alone.
    key.verifies_user = False
    Api.error(answer(api, sign_in_options(api), key), 401, "InvalidCredentials")
    key.verifies_user = True
    # A signature counter that did not move: a cloned authenticator.
    Api.data(answer(api, sign_in_options(api), key), 201)
    Api.error(answer(api, sign_in_options(api), key, count=False), 401, "InvalidCredentials")
    # Another site's page (a phishing origin).
    phished = SoftAuthenticator("https://login.example.net")
    phished.key, phished.credential_id, phished.sign_count = key.key, key.credential_id, 99
    phished.user_handle = key.user_handle
    Api.error(answer(api, sign_in_options(api), phished), 401, "InvalidCredentials")
    # A passkey nobody registered here.
    Api.error(answer(api, sign_in_options(api), SoftAuthenticator(api.base_url)), 401,
              "InvalidCredentials")
    # Malformed answers and unknown ceremonies are the client's error, never a 500.
    begun = sign_in_options(api)
    Api.error(api.post(f"{PASSKEYS}/login", {"ceremony": begun["ceremony"],
                                             "credential": {"id": 3}}), 422, "ValidationError")
    Api.error(api.post(f"{PASSKEYS}/login", {"ceremony": "nope", "credential": {}}), 422,
              "InvalidToken")
    Api.error(api.post(f"{PASSKEYS}/login", {"ceremony": "x"}), 400, "ParameterMissing")
    failures = [e["details"] for e in events(api, user_id=person.id, event="login_failed")]
    assert any("user verification" in d.lower() or "verified" in d.lower() for d in failures)
    assert any("sign count" in d.lower() or "counter" in d.lower() for d in failures)


def test_a_passkey_is_a_second_factor_after_the_password(api):
    person = make_user(api)
    key = SoftAuthenticator(api.base_url, verifies_user=False)  # a plain security key
    passkey = register(api, person, key)
    Api.error(try_login(api, person.email, PASSWORD), 401, "PasskeyRequired")
    err = Api.error(api.post(f"{PASSKEYS}/login/options", {"email_address": person.email,
                                                           "password": "wrong password"}),
                    401, "InvalidCredentials")
    assert "wrong" in err["message"]
    Api.error(api.post(f"{PASSKEYS}/login/options", {"email_address": person.email}), 400,
              "ParameterMissing")
    begun = sign_in_options(api, email_address=person.email, password=PASSWORD)
    assert [c["id"] for c in begun["options"]["allowCredentials"]] == [key.id]
    # Another account's passkey cannot finish this account's login.
    other = make_user(api)
    stranger = SoftAuthenticator(api.base_url)
    register(api, other, stranger)
    Api.error(answer(api, begun, stranger), 401, "InvalidCredentials")
    begun = sign_in_options(api, email_address=person.email, password=PASSWORD)
    session = Api.data(answer(api, begun, key), 201)  # no user verification needed here
    assert session["user"]["id"] == person.id
    [last] = events(api, user_id=person.id, event="login")[:1]
    assert last["details"] == f"password and passkey {passkey['id']} ({passkey['name']})"


def test_with_totp_too_either_factor_completes_the_password(api):
    person = make_user(api)
    secret = Api.data(api.post(f"{AUTH}/totp/enroll", bearer=person.token))["secret"]
    Api.data(api.post(f"{AUTH}/totp/activate",
                      {"code": pyotp.TOTP(secret).at(clock.timestamp())}, bearer=person.token))
    key = SoftAuthenticator(api.base_url)
    register(api, person, key)
    Api.error(try_login(api, person.email, PASSWORD), 401, "TOTPRequired")
    clock.advance(timedelta(seconds=30))
    login(api, person.email, PASSWORD, totp_code=pyotp.TOTP(secret).at(clock.timestamp()))
    begun = sign_in_options(api, email_address=person.email, password=PASSWORD)
    Api.data(answer(api, begun, key), 201)


def test_registering_needs_the_password_and_its_own_ceremony(api):
    person = make_user(api)
    Api.error(api.post(f"{PASSKEYS}/registration/options", {}, bearer=person.token), 400,
              "ParameterMissing")
    err = Api.error(api.post(f"{PASSKEYS}/registration/options", {"password": "not it"},
                             bearer=person.token), 422, "ValidationError")
    assert err["field"] == "password"
    Api.error(api.post(f"{PASSKEYS}/registration/options", {"password": PASSWORD}), 401,
              "Unauthorized")
    # Options made for one account cannot register a passkey on another.
    other = make_user(api)
    begun = Api.data(api.post(f"{PASSKEYS}/registration/options", {"password": PASSWORD},
                              bearer=person.token))
    key = SoftAuthenticator(api.base_url)
    Api.error(api.post(PASSKEYS, {"ceremony": begun["ceremony"],
                                  "credential": key.create(begun["options"])},
                       bearer=other.token), 422, "InvalidToken")
    # Made on another origin: refused and recorded.
    begun = Api.data(api.post(f"{PASSKEYS}/registration/options", {"password": PASSWORD},
                              bearer=person.token))
    phished = SoftAuthenticator("https://login.example.net")
    err = Api.error(api.post(PASSKEYS, {"ceremony": begun["ceremony"],
                                        "credential": phished.create(begun["options"])},
                             bearer=person.token), 422, "ValidationError")
    assert err["field"] == "credential" and "origin" in err["message"].lower()
    assert Api.data(api.get(PASSKEYS, bearer=person.token))["passkeys"] == []
    # The same authenticator twice: excluded by the options, refused if answered anyway.
    register(api, person, key)
    begun = Api.data(api.post(f"{PASSKEYS}/registration/options", {"password": PASSWORD},
                              bearer=person.token))
    assert [c["id"] for c in begun["options"]["excludeCredentials"]] == [key.id]
    Api.error(api.post(PASSKEYS, {"ceremony": begun["ceremony"],
                                  "credential": key.create(begun["options"])},
                       bearer=person.token), 422, "ValidationError")
    failed = [e for e in events(api, user_id=person.id, event="passkey_registered")
              if not e["success"]]
    assert failed and "origin" in failed[0]["details"].lower()


def test_rename_and_remove(api):
    person = make_user(api)
    key = SoftAuthenticator(api.base_url)
    passkey = register(api, person, key)
    renamed = Api.data(api.patch(f"{PASSKEYS}/{passkey['id']}", {"name": "Phone"},
                                 bearer=person.token))["passkey"]
    assert renamed["name"] == "Phone"
    other = make_user(api)
    Api.error(api.patch(f"{PASSKEYS}/{passkey['id']}", {"name": "Mine"}, bearer=other.token),
              404, "NotFound")
    Api.error(api.post(f"{PASSKEYS}/{passkey['id']}/remove", {"password": PASSWORD},
                       bearer=other.token), 404, "NotFound")
    Api.error(api.post(f"{PASSKEYS}/{passkey['id']}/remove", {}, bearer=person.token), 400,
              "ParameterMissing")
    Api.error(api.post(f"{PASSKEYS}/{passkey['id']}/remove", {"password": "not it"},
                       bearer=person.token), 422, "ValidationError")
    removed = Api.data(api.post(f"{PASSKEYS}/{passkey['id']}/remove", {"password": PASSWORD},
                                bearer=person.token))
    assert removed["deleted"] is True and removed["passkey"]["name"] == "Phone"
    assert Api.data(api.get(PASSKEYS, bearer=person.token))["passkeys"] == []
    # Gone: it signs no one in, and the password alone works again.
    Api.error(answer(api, sign_in_options(api), key), 401, "InvalidCredentials")
    login(api, person.email, PASSWORD)
    names = [e["event"] for e in events(api, user_id=person.id)]
    assert {"passkey_registered", "passkey_renamed", "passkey_removed",
            "passkey_remove_failed"} <= set(names)


def test_a_locked_account_is_not_signed_in_by_its_passkey(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "2")
    person = make_user(api)
    key = SoftAuthenticator(api.base_url)
    register(api, person, key)
    for _ in range(2):
        try_login(api, person.email, "wrong password")
    Api.error(answer(api, sign_in_options(api), key), 403, "AccountLocked")


def test_a_passkey_another_account_holds_is_refused_not_a_500(api):
    """Registration sees only the registering account's passkeys (row-level security on
    PostgreSQL): the unique index says the credential is taken, and the answer is the same
    422 as for one's own."""
    key = SoftAuthenticator(api.base_url)
    first, second = make_user(api), make_user(api)
    register(api, first, key)
    begun = Api.data(api.post(f"{PASSKEYS}/registration/options", {"password": PASSWORD},
                              bearer=second.token))
    err = Api.error(api.post(PASSKEYS, {"ceremony": begun["ceremony"],
                                        "credential": key.create(begun["options"])},
                             bearer=second.token), 422, "ValidationError")
    assert err["field"] == "credential" and "already registered" in err["message"]
    assert Api.data(api.get(PASSKEYS, bearer=second.token))["passkeys"] == []
    assert len(Api.data(api.get(PASSKEYS, bearer=first.token))["passkeys"]) == 1
