"""Two-factor authentication over HTTP: enroll, activate, login with a code, replay, disable."""
from __future__ import annotations

from datetime import timedelta

import pyotp
from sqlalchemy import select

from chalicelib import clock
from chalicelib.db.models import User
from tests.support.accounts import AUTH, PASSWORD, events, login, make_user, try_login
from tests.support import Api


def code_now(secret: str) -> str:
    return pyotp.TOTP(secret).at(clock.timestamp())


def test_totp_enrollment_login_replay_and_disable(api, db):
    person = make_user(api)
    enrolled = Api.data(api.post(f"{AUTH}/totp/enroll", bearer=person.token))
    secret = enrolled["secret"]
    assert enrolled["otpauth_url"].startswith("otpauth://totp/") and secret in enrolled["otpauth_url"]
    stored = db.scalar(select(User.totp_secret_encrypted).where(User.id == person.id))
    db.commit()
    assert stored and secret not in stored  # encrypted at rest

    # Not enforced until activated.
    login(api, person.email, PASSWORD)
    Api.error(api.post(f"{AUTH}/totp/activate", {"code": "000000" if code_now(secret) != "000000"
                                                  else "111111"}, bearer=person.token),
              401, "InvalidTOTPCode")
    first = code_now(secret)
    activated = Api.data(api.post(f"{AUTH}/totp/activate", {"code": first}, bearer=person.token))
    assert activated["user"]["totp_enabled"] is True
    Api.error(api.post(f"{AUTH}/totp/enroll", bearer=person.token), 422, "ValidationError")

    Api.error(try_login(api, person.email, PASSWORD), 401, "TOTPRequired")
    # The code that activated 2FA is used up: replaying it is refused.
    Api.error(try_login(api, person.email, PASSWORD, totp_code=first), 401, "InvalidTOTPCode")
    Api.error(try_login(api, person.email, PASSWORD, totp_code="12345x"), 401, "InvalidTOTPCode")
    # A wrong password with a good code is still wrong credentials.
    clock.advance(timedelta(seconds=30))
    second = code_now(secret)
    Api.error(try_login(api, person.email, "not the password", totp_code=second), 401,
              "InvalidCredentials")
    session = login(api, person.email, PASSWORD, totp_code=second)
    Api.error(try_login(api, person.email, PASSWORD, totp_code=second), 401, "InvalidTOTPCode")

    token = session["session_token"]
    err = Api.error(api.post(f"{AUTH}/totp/disable", {"password": "wrong password"},
                             bearer=token), 422, "ValidationError")
    assert err["field"] == "password"
    Api.error(api.post(f"{AUTH}/totp/disable", {}, bearer=token), 400, "ParameterMissing")
    disabled = Api.data(api.post(f"{AUTH}/totp/disable", {"password": PASSWORD}, bearer=token))
    assert disabled["user"]["totp_enabled"] is False
    login(api, person.email, PASSWORD)
    names = {e["event"] for e in events(api, user_id=person.id)}
    assert {"totp_enrolled", "totp_enabled", "totp_disabled", "login", "login_failed"} <= names


def test_wrong_totp_codes_count_toward_the_lockout(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "2")
    person = make_user(api)
    secret = Api.data(api.post(f"{AUTH}/totp/enroll", bearer=person.token))["secret"]
    Api.data(api.post(f"{AUTH}/totp/activate", {"code": code_now(secret)}, bearer=person.token))
    wrong = str((int(code_now(secret)) + 1) % 1_000_000).zfill(6)
    Api.error(try_login(api, person.email, PASSWORD, totp_code=wrong), 401, "InvalidTOTPCode")
    Api.error(try_login(api, person.email, PASSWORD, totp_code=wrong), 403, "AccountLocked")
    clock.advance(timedelta(seconds=30))
    Api.error(try_login(api, person.email, PASSWORD, totp_code=code_now(secret)), 403,
              "AccountLocked")


def test_totp_endpoints_need_a_session(api):
    Api.error(api.post(f"{AUTH}/totp/enroll"), 401, "Unauthorized")
    Api.error(api.post(f"{AUTH}/totp/activate", {"code": "123456"}), 401, "Unauthorized")
    person = make_user(api)
    Api.error(api.post(f"{AUTH}/totp/activate", {"code": "123456"}, bearer=person.token), 422,
              "ValidationError")  # nothing enrolled
