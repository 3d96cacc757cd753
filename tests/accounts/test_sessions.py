"""A user's own sessions: listed with where and when each was used (never a token), revoked
one by one, or all but the current one; nobody reaches another user's sessions."""
from __future__ import annotations

from tests.support.accounts import AUTH, events, login, make_user
from tests.support import Api


def _sessions(api, token) -> list[dict]:
    return Api.data(api.get(f"{AUTH}/sessions", bearer=token))["sessions"]


def test_list_revoke_one_and_revoke_the_others(api):
    person = make_user(api)  # first session: person.token
    laptop = login(api, person.email, person.password)["session_token"]
    phone = api.post(f"{AUTH}/login", {"email_address": person.email,
                                       "password": person.password},
                     headers={"User-Agent": "PhoneMail/2.0"}).json()["data"]["session_token"]

    listed = _sessions(api, laptop)
    assert len(listed) == 3 and [s["current"] for s in listed].count(True) == 1
    assert "PhoneMail/2.0" in {s["user_agent"] for s in listed}
    assert all(set(s) == {"id", "current", "ip_address", "user_agent", "created_at",
                          "last_used_at", "expires_at"} for s in listed)
    assert all(token not in str(listed) for token in (person.token, laptop, phone))

    phone_id = next(s["id"] for s in listed if s["user_agent"] == "PhoneMail/2.0")
    revoked = Api.data(api.delete(f"{AUTH}/sessions/{phone_id}", bearer=laptop))
    assert revoked["revoked"] is True and revoked["session"]["current"] is False
    assert api.get(f"{AUTH}/me", bearer=phone).status_code == 401
    assert api.delete(f"{AUTH}/sessions/{phone_id}", bearer=laptop).status_code == 404

    assert Api.data(api.post(f"{AUTH}/sessions/revoke_others", bearer=laptop)) == {"revoked": 1}
    assert api.get(f"{AUTH}/me", bearer=person.token).status_code == 401
    assert [s["current"] for s in _sessions(api, laptop)] == [True]
    kinds = {e["event"] for e in events(api, user_id=person.id)}
    assert {"session_revoked", "sessions_revoked"} <= kinds


def test_another_users_session_is_not_found_and_revoking_your_own_is_a_logout(api):
    ann, bob = make_user(api), make_user(api)
    bob_session = _sessions(api, bob.token)[0]["id"]
    assert api.delete(f"{AUTH}/sessions/{bob_session}", bearer=ann.token).status_code == 404
    assert api.get(f"{AUTH}/me", bearer=bob.token).status_code == 200

    own = _sessions(api, ann.token)[0]["id"]
    assert Api.data(api.delete(f"{AUTH}/sessions/{own}", bearer=ann.token))["session"][
        "current"] is True
    assert api.get(f"{AUTH}/sessions", bearer=ann.token).status_code == 401
    assert api.get(f"{AUTH}/sessions").status_code == 401  # no bearer at all
