"""Invitations over HTTP: invite (token once), list, revoke, public preview, accept (new and
existing accounts), expiry, owner invitations."""
from __future__ import annotations

from datetime import timedelta

from chalicelib import clock
from tests.support.accounts import ADMIN, AUTH, PASSWORD, login, make_user
from tests.support import Api, unique


def setup_org(api):
    owner = make_user(api)
    org = Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("Inv")}, bearer=owner.token),
                   201)["organization"]["permalink"]
    return owner, org, f"{ADMIN}/organizations/{org}/invitations"


def test_invite_a_new_person_who_creates_an_account(api, monkeypatch):
    monkeypatch.setenv("AUTH_FRONTEND_URL", "https://app.example.test/")
    owner, org, invitations = setup_org(api)
    email = f"{unique('new')}@example.com"
    inv = Api.data(api.post(invitations, {"email_address": email, "role": "admin"},
                            bearer=owner.token), 201)["invitation"]
    token = inv["token"]
    assert inv["status"] == "pending" and inv["role"] == "admin" and len(token) >= 32
    assert inv["url"] == f"https://app.example.test/invitations/{token}"
    listed = Api.data(api.get(invitations, bearer=owner.token))["invitations"]
    assert listed[0]["id"] == inv["id"] and "token" not in listed[0]  # returned once only

    preview = Api.data(api.get(f"{AUTH}/invitations/{token}"))["invitation"]
    assert preview["email_address"] == email and preview["organization"]["permalink"] == org
    assert preview["account_exists"] is False
    Api.error(api.get(f"{AUTH}/invitations/not-a-real-token"), 422, "ValidationError")

    Api.error(api.post(f"{AUTH}/invitations/accept", {"token": token}), 400, "ParameterMissing")
    Api.error(api.post(f"{AUTH}/invitations/accept", {"token": token, "password": "short"}), 422,
              "ValidationError")
    accepted = Api.data(api.post(f"{AUTH}/invitations/accept",
                                 {"token": token, "password": PASSWORD, "first_name": "Nia"}), 201)
    assert accepted["membership"]["role"] == "admin" and accepted["user"]["email_address"] == email
    session = accepted["session_token"]
    orgs = Api.data(api.get(f"{ADMIN}/organizations", bearer=session))["organizations"]
    assert [o["permalink"] for o in orgs] == [org]
    login(api, email, PASSWORD)
    # Used once only.
    Api.error(api.post(f"{AUTH}/invitations/accept", {"token": token, "password": PASSWORD}), 422,
              "ValidationError")
    Api.error(api.get(f"{AUTH}/invitations/{token}"), 422, "ValidationError")
    assert Api.data(api.get(f"{invitations}/{inv['id']}", bearer=owner.token))[
        "invitation"]["status"] == "accepted"


def test_an_existing_account_accepts_while_signed_in(api):
    owner, org, invitations = setup_org(api)
    invitee, other = make_user(api), make_user(api)
    token = Api.data(api.post(invitations, {"email_address": invitee.email},
                              bearer=owner.token), 201)["invitation"]["token"]
    assert Api.data(api.get(f"{AUTH}/invitations/{token}"))["invitation"]["account_exists"] is True
    Api.error(api.post(f"{AUTH}/invitations/accept", {"token": token, "password": "hijack me!"}),
              401, "Unauthorized")
    Api.error(api.post(f"{AUTH}/invitations/accept", {"token": token}, bearer=other.token), 403,
              "Forbidden")
    accepted = Api.data(api.post(f"{AUTH}/invitations/accept", {"token": token},
                                 bearer=invitee.token), 201)
    assert accepted["membership"]["role"] == "member" and "session_token" not in accepted
    Api.error(api.post(invitations, {"email_address": invitee.email}, bearer=owner.token), 422,
              "ValidationError")  # already a member


def test_revoke_expiry_and_who_may_invite(api, monkeypatch):
    owner, org, invitations = setup_org(api)
    admin = make_user(api)
    Api.data(api.post(f"{ADMIN}/organizations/{org}/members", {"user_id": admin.id, "role": "admin"},
                      bearer=owner.token), 201)
    email = f"{unique('x')}@example.com"
    first = Api.data(api.post(invitations, {"email_address": email}, bearer=admin.token),
                     201)["invitation"]
    # Re-inviting replaces the pending invitation.
    second = Api.data(api.post(invitations, {"email_address": email}, bearer=admin.token),
                      201)["invitation"]
    Api.error(api.get(f"{AUTH}/invitations/{first['token']}"), 422, "ValidationError")
    revoked = Api.data(api.delete(f"{invitations}/{second['id']}", bearer=admin.token))
    assert revoked["invitation"]["status"] == "revoked"
    Api.error(api.get(f"{AUTH}/invitations/{second['token']}"), 422, "ValidationError")
    Api.error(api.delete(f"{invitations}/{second['id']}", bearer=admin.token), 422,
              "ValidationError")

    Api.error(api.post(invitations, {"email_address": email, "role": "owner"}, bearer=admin.token),
              403, "Forbidden")
    Api.error(api.post(invitations, {"email_address": "not an address"}, bearer=admin.token), 422,
              "ValidationError")
    Api.error(api.post(invitations, {"email_address": email, "role": "god"}, bearer=admin.token),
              422, "ValidationError")
    owner_inv = Api.data(api.post(invitations, {"email_address": email, "role": "owner"},
                                  bearer=owner.token), 201)["invitation"]
    clock.advance(timedelta(days=7, minutes=1))
    Api.error(api.get(f"{AUTH}/invitations/{owner_inv['token']}"), 422, "ValidationError")
    Api.error(api.post(f"{AUTH}/invitations/accept", {"token": owner_inv["token"],
                                                      "password": PASSWORD}),
              422, "ValidationError")
    listed = Api.data(api.get(invitations, bearer=owner.token))["invitations"]
    assert listed[0]["status"] == "expired"
