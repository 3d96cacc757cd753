"""Accounts over HTTP: registration, login, lockout, sessions, password change and reset."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.models import User
from tests.support.accounts import ADMIN, AUTH, PASSWORD, events, login, make_user, try_login
from tests.support import Api, unique


def test_registration_is_off_by_default(api):
    Api.error(api.post(f"{AUTH}/register", {"email_address": "a@example.com", "first_name": "A",
                                             "last_name": "B", "password": PASSWORD}),
              403, "RegistrationDisabled")


def test_register_me_profile_and_logout(api, monkeypatch):
    monkeypatch.setenv("AUTH_ALLOW_REGISTRATION", "true")
    email = f"{unique('Reg')}@Example.com"
    body = {"email_address": email, "first_name": "Ada", "last_name": "Lovelace",
            "password": PASSWORD}
    session = Api.data(api.post(f"{AUTH}/register", body), 201)
    assert set(session) == {"session_token", "expires_at", "user"}
    assert session["user"]["email_address"] == email.lower()
    assert "password_hash" not in session["user"] and len(session["session_token"]) >= 32

    err = Api.error(api.post(f"{AUTH}/register", {**body, "email_address": email.upper()}),
                    422, "ValidationError")
    assert err["field"] == "email_address"
    err = Api.error(api.post(f"{AUTH}/register", {**body, "email_address": "x" + email,
                                                   "password": "short"}), 422, "ValidationError")
    assert err["field"] == "password"
    err = Api.error(api.post(f"{AUTH}/register", {**body, "email_address": "not-an-address"}),
                    422, "ValidationError")
    assert err["field"] == "email_address"
    err = Api.error(api.post(f"{AUTH}/register", {"email_address": "y" + email}), 400,
                    "ParameterMissing")
    assert err["field"] == "first_name"

    token = session["session_token"]
    me = Api.data(api.get(f"{AUTH}/me", bearer=token))
    assert me["user"]["first_name"] == "Ada" and me["memberships"] == []
    org = Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("Mine")}, bearer=token),
                   201)["organization"]
    me = Api.data(api.patch(f"{AUTH}/me", {"first_name": "Augusta"}, bearer=token))
    assert me["user"]["first_name"] == "Augusta" and me["user"]["last_name"] == "Lovelace"
    assert me["memberships"] == [{"role": "owner", "organization": {
        "id": org["id"], "name": org["name"], "permalink": org["permalink"]}}]

    Api.data(api.post(f"{AUTH}/logout", bearer=token))
    Api.error(api.get(f"{AUTH}/me", bearer=token), 401, "Unauthorized")
    Api.error(api.get(f"{AUTH}/me"), 401, "Unauthorized")
    Api.error(api.get(f"{AUTH}/me", bearer="forged-token"), 401, "Unauthorized")


def test_registration_requires_all_four_fields(api, monkeypatch):
    """The spec lists email_address, first_name, last_name and password, none optional:
    absent is ParameterMissing naming the field, empty (or blank) a 422, and nothing is
    stored either way."""
    monkeypatch.setenv("AUTH_ALLOW_REGISTRATION", "true")
    email = f"{unique('req')}@example.com"
    body = {"email_address": email, "first_name": "Ada", "last_name": "Lovelace",
            "password": PASSWORD}
    for name in body:
        partial = {k: v for k, v in body.items() if k != name}
        err = Api.error(api.post(f"{AUTH}/register", partial), 400, "ParameterMissing")
        assert err["field"] == name and name in err["message"]
    for name in body:
        err = Api.error(api.post(f"{AUTH}/register", {**body, name: ""}), 422,
                        "ValidationError")
        assert err["field"] == name
    for name in ("first_name", "last_name"):
        err = Api.error(api.post(f"{AUTH}/register", {**body, name: "  "}), 422,
                        "ValidationError")
        assert err["field"] == name and "empty" in err["message"]
    # None of those created the account: the full request still can.
    user = Api.data(api.post(f"{AUTH}/register", body), 201)["user"]
    assert (user["first_name"], user["last_name"]) == ("Ada", "Lovelace")


def test_login_answers_the_same_for_unknown_addresses_and_wrong_passwords(api):
    person = make_user(api, sign_in=False)
    session = login(api, person.email.upper(), PASSWORD)
    assert session["user"]["id"] == person.id and session["expires_at"].endswith("Z")
    unknown = Api.error(try_login(api, f"{unique('nobody')}@example.com", PASSWORD), 401,
                        "InvalidCredentials")
    wrong = Api.error(try_login(api, person.email, "wrong password!"), 401, "InvalidCredentials")
    assert unknown["message"] == wrong["message"]
    Api.error(try_login(api, "not an address", PASSWORD), 401, "InvalidCredentials")
    err = Api.error(api.post(f"{AUTH}/login", {"email_address": person.email}), 400,
                    "ParameterMissing")
    assert err["field"] == "password"


def test_lockout_after_max_attempts_and_its_expiry(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "3")
    monkeypatch.setenv("AUTH_LOCKOUT_MINUTES", "15")
    person = make_user(api, sign_in=False)
    for _ in range(2):
        Api.error(try_login(api, person.email, "wrong password"), 401, "InvalidCredentials")
    Api.error(try_login(api, person.email, "wrong password"), 403, "AccountLocked")
    # The right password does not open a locked account.
    Api.error(try_login(api, person.email, PASSWORD), 403, "AccountLocked")
    clock.advance(timedelta(minutes=14))
    Api.error(try_login(api, person.email, PASSWORD), 403, "AccountLocked")
    clock.advance(timedelta(minutes=2))
    assert login(api, person.email, PASSWORD)["user"]["id"] == person.id

    trail = events(api, user_id=person.id)
    names = [e["event"] for e in trail]
    assert names[0] == "login" and "lockout" in names
    assert names.count("login_failed") >= 4  # 3 wrong passwords + 2 attempts while locked
    # A success resets the counter: two new failures do not lock.
    for _ in range(2):
        Api.error(try_login(api, person.email, "wrong password"), 401, "InvalidCredentials")
    login(api, person.email, PASSWORD)


def test_password_change_revokes_every_session_and_returns_a_fresh_one(api):
    person = make_user(api)
    second = login(api, person.email, PASSWORD)["session_token"]
    err = Api.error(api.post(f"{AUTH}/password", {"current_password": "not it at all",
                                                  "new_password": "brand new password"},
                             bearer=person.token), 422, "ValidationError")
    assert err["field"] == "current_password"
    err = Api.error(api.post(f"{AUTH}/password", {"current_password": PASSWORD,
                                                  "new_password": "short"},
                             bearer=person.token), 422, "ValidationError")
    assert err["field"] == "new_password"

    fresh = Api.data(api.post(f"{AUTH}/password", {"current_password": PASSWORD,
                                                   "new_password": "brand new password"},
                              bearer=person.token))
    assert fresh["user"]["id"] == person.id and fresh["session_token"]
    for old in (person.token, second):
        Api.error(api.get(f"{AUTH}/me", bearer=old), 401, "Unauthorized")
    assert Api.data(api.get(f"{AUTH}/me", bearer=fresh["session_token"]))["user"]["id"] == person.id
    Api.error(try_login(api, person.email, PASSWORD), 401, "InvalidCredentials")
    login(api, person.email, "brand new password")
    assert any(e["event"] == "password_changed" for e in events(api, user_id=person.id))


def test_a_user_changes_their_own_email_address_with_their_password(api):
    person, other = make_user(api), make_user(api)
    new = f"{unique('Moved')}@Example.com"
    me = f"{AUTH}/me"
    # The password is needed, and must be right; a taken or invalid address is refused.
    err = Api.error(api.patch(me, {"email_address": new}, bearer=person.token),
                    400, "ParameterMissing")
    assert err["field"] == "current_password"
    err = Api.error(api.patch(me, {"email_address": new, "current_password": "not it"},
                              bearer=person.token), 422, "ValidationError")
    assert err["field"] == "current_password"
    err = Api.error(api.patch(me, {"email_address": other.email, "current_password": PASSWORD},
                              bearer=person.token), 422, "ValidationError")
    assert err["field"] == "email_address" and "already exists" in err["message"]
    err = Api.error(api.patch(me, {"email_address": "nowhere", "current_password": PASSWORD},
                              bearer=person.token), 422, "ValidationError")
    assert err["field"] == "email_address"
    # The same address (any case) needs no password; nothing changes.
    same = Api.data(api.patch(me, {"email_address": person.email.upper(), "first_name": "Bo"},
                              bearer=person.token))["user"]
    assert (same["email_address"], same["first_name"]) == (person.email, "Bo")
    moved = Api.data(api.patch(me, {"email_address": new, "current_password": PASSWORD},
                               bearer=person.token))["user"]
    assert moved["email_address"] == new.lower()
    Api.error(try_login(api, person.email, PASSWORD), 401, "InvalidCredentials")
    login(api, new, PASSWORD)
    trail = [e["event"] for e in events(api, user_id=person.id)]
    assert "email_changed" in trail and "email_change_failed" in trail


def test_password_reset_request_is_identical_for_unknown_addresses(api):
    person = make_user(api)
    known = api.post(f"{AUTH}/password-reset", {"email_address": person.email})
    unknown = api.post(f"{AUTH}/password-reset",
                       {"email_address": f"{unique('ghost')}@example.com"})
    assert known.status_code == unknown.status_code == 200
    assert Api.data(known) == Api.data(unknown) and "reset_token" not in Api.data(known)

    # The operator (admin API key) gets the token to hand out; links point to the frontend.
    issued = Api.data(api.post(f"{AUTH}/password-reset", {"email_address": person.email},
                               headers={"X-Admin-API-Key": api.admin_key}))
    assert issued["reset_token"] and issued["expires_at"]
    ghost = Api.data(api.post(f"{AUTH}/password-reset",
                              {"email_address": f"{unique('ghost')}@example.com"},
                              headers={"X-Admin-API-Key": api.admin_key}))
    assert ghost == Api.data(unknown)

    complete = f"{AUTH}/password-reset/complete"
    err = Api.error(api.post(complete, {"token": issued["reset_token"], "password": "short"}),
                    422, "ValidationError")
    assert err["field"] == "password"
    err = Api.error(api.post(complete, {"token": "made-up-token", "password": "a new password"}),
                    422, "ValidationError")
    assert err["field"] == "token"
    Api.data(api.post(complete, {"token": issued["reset_token"], "password": "a new password"}))
    Api.error(api.get(f"{AUTH}/me", bearer=person.token), 401, "Unauthorized")
    Api.error(api.post(complete, {"token": issued["reset_token"], "password": "another one!"}),
              422, "ValidationError")  # used once only
    login(api, person.email, "a new password")


def test_reset_tokens_from_the_admin_endpoint_expire(api, monkeypatch):
    monkeypatch.setenv("AUTH_FRONTEND_URL", "https://app.example.test")
    person = make_user(api, sign_in=False)
    issued = Api.data(api.post(f"{ADMIN}/users/{person.id}/password_reset"), 201)["password_reset"]
    assert issued["reset_url"] == f"https://app.example.test/password-reset/{issued['reset_token']}"
    clock.advance(timedelta(hours=2, minutes=1))
    Api.error(api.post(f"{AUTH}/password-reset/complete",
                       {"token": issued["reset_token"], "password": "a new password"}),
              422, "ValidationError")


def test_a_reset_lifts_a_lockout(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "2")
    person = make_user(api, sign_in=False)
    Api.error(try_login(api, person.email, "wrong password"), 401, "InvalidCredentials")
    Api.error(try_login(api, person.email, "wrong password"), 403, "AccountLocked")
    issued = Api.data(api.post(f"{ADMIN}/users/{person.id}/password_reset"), 201)["password_reset"]
    Api.data(api.post(f"{AUTH}/password-reset/complete",
                      {"token": issued["reset_token"], "password": "after the reset"}))
    login(api, person.email, "after the reset")


def test_hash_is_upgraded_when_parameters_change(api, db, monkeypatch):
    person = make_user(api, sign_in=False)
    before = db.scalar(select(User.password_hash).where(User.id == person.id))
    db.commit()  # end the read: SQLite's writer lock must be free for the stack
    assert before.startswith("$argon2id$") and ",t=3," in before
    monkeypatch.setenv("PASSWORD_HASH_TIME_COST", "2")
    login(api, person.email, PASSWORD)
    after = db.scalar(select(User.password_hash).where(User.id == person.id))
    db.commit()
    assert after.startswith("$argon2id$") and ",t=2," in after
    login(api, person.email, PASSWORD)  # the new hash verifies


def test_auth_events_record_time_user_ip_and_user_agent(api):
    person = make_user(api, sign_in=False)
    api.post(f"{AUTH}/login", {"email_address": person.email, "password": PASSWORD},
             headers={"User-Agent": "audit-test/1.0"})
    api.post(f"{AUTH}/login", {"email_address": person.email, "password": "nope nope"},
             headers={"User-Agent": "audit-test/1.0"})
    trail = events(api, user_id=person.id, limit=10)
    assert [e["event"] for e in trail[:2]] == ["login_failed", "login"]  # newest first
    failed, ok = trail[0], trail[1]
    assert failed["success"] is False and ok["success"] is True
    for entry in (failed, ok):
        assert entry["user_id"] == person.id and entry["email_address"] == person.email
        assert entry["ip_address"] == "127.0.0.1" and entry["user_agent"] == "audit-test/1.0"
        assert entry["created_at"].endswith("Z")
    assert len(events(api, limit=1)) == 1
    Api.error(api.get(f"{ADMIN}/auth_events?limit=1001"), 422, "ValidationError")
    Api.error(api.get(f"{ADMIN}/auth_events?limit=x"), 422, "ValidationError")
    Api.error(api.get(f"{ADMIN}/auth_events", bearer=make_user(api).token), 403, "Forbidden")

    key = Api.data(api.post(f"{ADMIN}/admin_api_keys", {"name": "audited"}), 201)["admin_api_key"]
    Api.data(api.delete(f"{ADMIN}/admin_api_keys/{key['id']}"))
    names = [e["event"] for e in events(api, limit=5)]
    assert names[:2] == ["admin_api_key_revoked", "admin_api_key_created"]


def test_sessions_expire_after_the_configured_days(api, monkeypatch):
    monkeypatch.setenv("AUTH_SESSION_TIMEOUT_DAYS", "2")
    person = make_user(api)
    clock.advance(timedelta(days=1, hours=23))
    assert Api.data(api.get(f"{AUTH}/me", bearer=person.token))["user"]["id"] == person.id
    clock.advance(timedelta(hours=2))
    Api.error(api.get(f"{AUTH}/me", bearer=person.token), 401, "Unauthorized")
    Api.error(api.get(f"{ADMIN}/organizations", bearer=person.token), 401, "Unauthorized")
