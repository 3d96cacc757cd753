"""Role-scoped management over HTTP with Bearer sessions: organizations, servers, members,
last-owner protection, instance admins, users administration."""
from __future__ import annotations

import pytest

from tests.conftest import TEST_DATABASE_URL
from tests.support.accounts import ADMIN, PASSWORD, login, make_user
from tests.support import Api, unique


def org_path(org: str) -> str:
    return f"{ADMIN}/organizations/{org}"


@pytest.fixture
def team(api):
    """Organization A (owner, admin, member, viewer) with a server; organization B of a stranger."""
    owner, admin, member, viewer, stranger = (make_user(api) for _ in range(5))
    org_a = Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("A")},
                              bearer=owner.token), 201)["organization"]["permalink"]
    for person, role in ((admin, "admin"), (member, "member"), (viewer, "viewer")):
        Api.data(api.post(org_path(org_a) + "/members", {"user_id": person.id, "role": role},
                          bearer=owner.token), 201)
    srv_a = Api.data(api.post(org_path(org_a) + "/servers", {"name": "Main"}, bearer=admin.token),
                     201)["server"]["permalink"]
    org_b = Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("B")},
                              bearer=stranger.token), 201)["organization"]["permalink"]
    srv_b = Api.data(api.post(org_path(org_b) + "/servers", {"name": "Theirs"},
                              bearer=stranger.token), 201)["server"]["permalink"]
    return dict(owner=owner, admin=admin, member=member, viewer=viewer, stranger=stranger,
                org_a=org_a, srv_a=srv_a, org_b=org_b, srv_b=srv_b)


def test_a_member_of_one_organization_cannot_see_anothers(api, team):
    member, a, b = team["member"], team["org_a"], team["org_b"]
    listed = Api.data(api.get(f"{ADMIN}/organizations", bearer=member.token))["organizations"]
    assert [o["permalink"] for o in listed] == [a]
    Api.error(api.get(org_path(b), bearer=member.token), 404, "NotFound")
    Api.error(api.get(org_path(b) + "/servers", bearer=member.token), 404, "NotFound")
    b_server = org_path(b) + f"/servers/{team['srv_b']}"
    for method, path in (("GET", b_server), ("DELETE", b_server), ("POST", b_server + "/suspend"),
                         ("GET", b_server + "/domains"), ("GET", b_server + "/credentials"),
                         ("GET", org_path(b) + "/members")):
        Api.error(api.request(method, path, json={}, bearer=member.token), 404, "NotFound")
    # Unknown and foreign organizations answer alike: existence is not disclosed.
    Api.error(api.get(org_path("no-such-org-anywhere"), bearer=member.token), 404, "NotFound")
    # Their own organization's server is visible.
    assert Api.data(api.get(org_path(a) + f"/servers/{team['srv_a']}", bearer=member.token))


def test_roles_inside_an_organization(api, team):
    a, srv = team["org_a"], team["srv_a"]
    base = org_path(a) + f"/servers/{srv}"
    viewer, member, admin, owner = team["viewer"], team["member"], team["admin"], team["owner"]

    # viewer: reads, no writes
    assert Api.data(api.get(base + "/domains", bearer=viewer.token))["domains"] == []
    Api.error(api.post(base + "/domains", {"name": f"{unique('v')}.example.com"},
                       bearer=viewer.token), 403, "Forbidden")
    Api.error(api.get(base + "/credentials", bearer=viewer.token), 403, "Forbidden")
    Api.error(api.post(org_path(a) + "/servers", {"name": "x"}, bearer=viewer.token), 403,
              "Forbidden")
    # member: domains yes, credentials read but not create, servers no
    Api.data(api.post(base + "/domains", {"name": f"{unique('m')}.example.com"},
                      bearer=member.token), 201)
    assert Api.data(api.get(base + "/credentials", bearer=member.token))["credentials"] == []
    Api.error(api.post(base + "/credentials", {"type": "API", "name": "k"}, bearer=member.token),
              403, "Forbidden")
    Api.error(api.patch(base, {"name": "renamed"}, bearer=member.token), 403, "Forbidden")
    Api.error(api.get(org_path(a) + "/invitations", bearer=member.token), 403, "Forbidden")
    Api.error(api.post(org_path(a) + "/members", {"user_id": viewer.id}, bearer=member.token),
              403, "Forbidden")
    # admin: servers and credentials, not deleting the organization
    Api.data(api.post(base + "/credentials", {"type": "API", "name": "k"}, bearer=admin.token), 201)
    Api.data(api.patch(base, {"name": "renamed"}, bearer=admin.token))
    Api.error(api.delete(org_path(a), bearer=admin.token), 403, "Forbidden")
    # instance-wide resources are for instance admins only
    for path in ("/ip_pools", "/admin_api_keys", "/users", "/auth_events"):
        Api.error(api.get(ADMIN + path, bearer=owner.token), 403, "Forbidden")
    # owner deletes
    Api.data(api.delete(org_path(a), bearer=owner.token))
    Api.error(api.get(org_path(a), bearer=owner.token), 404, "NotFound")


def test_last_owner_protection_and_owner_transitions(api, team):
    a, owner, admin, member = team["org_a"], team["owner"], team["admin"], team["member"]
    members = org_path(a) + "/members"
    listed = Api.data(api.get(members, bearer=team["viewer"].token))["members"]
    assert {m["user_id"]: m["role"] for m in listed}[owner.id] == "owner"

    Api.error(api.patch(f"{members}/{owner.id}", {"role": "admin"}, bearer=owner.token), 422,
              "ValidationError")
    Api.error(api.delete(f"{members}/{owner.id}", bearer=owner.token), 422, "ValidationError")
    Api.error(api.delete(f"{members}/{owner.id}"), 422, "ValidationError")  # admin key too
    # Only an owner makes or unmakes owners.
    Api.error(api.patch(f"{members}/{member.id}", {"role": "owner"}, bearer=admin.token), 403,
              "Forbidden")
    Api.error(api.patch(f"{members}/{owner.id}", {"role": "member"}, bearer=admin.token), 403,
              "Forbidden")
    Api.error(api.delete(f"{members}/{owner.id}", bearer=admin.token), 403, "Forbidden")
    Api.error(api.patch(f"{members}/{member.id}", {"role": "emperor"}, bearer=owner.token), 422,
              "ValidationError")
    # An admin manages non-owners.
    assert Api.data(api.patch(f"{members}/{member.id}", {"role": "viewer"},
                              bearer=admin.token))["member"]["role"] == "viewer"

    Api.data(api.patch(f"{members}/{admin.id}", {"role": "owner"}, bearer=owner.token))
    assert Api.data(api.patch(f"{members}/{owner.id}", {"role": "member"},
                              bearer=admin.token))["member"]["role"] == "member"
    # The former owner, now a member, may leave; the remaining (last) owner may not.
    Api.data(api.delete(f"{members}/{owner.id}", bearer=owner.token))
    Api.error(api.get(org_path(a), bearer=owner.token), 404, "NotFound")
    Api.error(api.delete(f"{members}/{admin.id}", bearer=admin.token), 422, "ValidationError")
    Api.error(api.get(f"{members}/999999", bearer=admin.token), 404, "NotFound")


def test_adding_members(api, team):
    a, owner = team["org_a"], team["owner"]
    members = org_path(a) + "/members"
    newcomer = make_user(api, sign_in=False)
    added = Api.data(api.post(members, {"email_address": newcomer.email.upper()},
                              bearer=owner.token), 201)["member"]
    assert added["user_id"] == newcomer.id and added["role"] == "member"
    Api.error(api.post(members, {"user_id": newcomer.id}, bearer=owner.token), 422,
              "ValidationError")
    Api.error(api.post(members, {"user_id": 99999999}, bearer=owner.token), 422, "ValidationError")
    Api.error(api.post(members, {"role": "member"}, bearer=owner.token), 400, "ParameterMissing")
    Api.error(api.post(members, {"user_id": team["stranger"].id, "role": "owner"},
                       bearer=team["admin"].token), 403, "Forbidden")


def test_organization_creation_obeys_the_setting(api, monkeypatch):
    person = make_user(api)
    monkeypatch.setenv("AUTH_ALLOW_ORGANIZATION_CREATION", "false")
    Api.error(api.post(f"{ADMIN}/organizations", {"name": "Nope"}, bearer=person.token), 403,
              "Forbidden")
    Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("ByKey")}), 201)
    monkeypatch.setenv("AUTH_ALLOW_ORGANIZATION_CREATION", "true")
    Api.data(api.post(f"{ADMIN}/organizations", {"name": unique("Yes")}, bearer=person.token), 201)


def test_first_instance_admin_made_with_the_admin_key_has_full_access(api, team):
    boss = make_user(api, admin=True)
    assert Api.data(api.get("/api/v2/auth/me", bearer=boss.token))["user"]["admin"] is True
    # Full access: every organization, instance resources, users administration.
    assert Api.data(api.get(org_path(team["org_b"]), bearer=boss.token))
    assert Api.data(api.get(f"{ADMIN}/ip_pools", bearer=boss.token))
    users = Api.data(api.get(f"{ADMIN}/users?per_page=100", bearer=boss.token))
    assert users["pagination"]["total"] >= 6
    created = Api.data(api.post(f"{ADMIN}/users", {"email_address": f"{unique('n')}@example.com",
                                                    "password": PASSWORD}, bearer=boss.token),
                       201)["user"]
    assert created["admin"] is False and created["has_password"] is True
    Api.error(api.post(f"{ADMIN}/users", {"email_address": created["email_address"]},
                       bearer=boss.token), 422, "ValidationError")
    Api.error(api.post(f"{ADMIN}/users", {"email_address": "x@example.com", "password": "short"}),
              422, "ValidationError")

    updated = Api.data(api.patch(f"{ADMIN}/users/{created['id']}", {"first_name": "Renamed",
                                                                    "admin": True},
                                 bearer=boss.token))["user"]
    assert updated["first_name"] == "Renamed" and updated["admin"] is True
    Api.error(api.patch(f"{ADMIN}/users/{boss.id}", {"admin": False}, bearer=boss.token), 422,
              "ValidationError")
    shown = Api.data(api.get(f"{ADMIN}/users/{team['owner'].id}", bearer=boss.token))
    assert shown["memberships"][0]["role"] == "owner"
    # The sole owner of an organization cannot be deleted; others can.
    Api.error(api.delete(f"{ADMIN}/users/{team['owner'].id}", bearer=boss.token), 422,
              "ValidationError")
    Api.data(api.delete(f"{ADMIN}/users/{created['id']}", bearer=boss.token))
    Api.error(api.get(f"{ADMIN}/users/{created['id']}", bearer=boss.token), 404, "NotFound")
    Api.error(api.get(f"{ADMIN}/users/{team['owner'].id}", bearer=team["owner"].token), 403,
              "Forbidden")


def test_admin_can_lift_a_lockout_and_set_a_password(api, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "1")
    person = make_user(api)
    Api.error(api.post("/api/v2/auth/login", {"email_address": person.email,
                                               "password": "wrong password"}), 403,
              "AccountLocked")
    Api.data(api.patch(f"{ADMIN}/users/{person.id}", {"locked": False}))
    login(api, person.email, PASSWORD)
    Api.data(api.patch(f"{ADMIN}/users/{person.id}", {"password": "set by the operator"}))
    Api.error(api.get("/api/v2/auth/me", bearer=person.token), 401, "Unauthorized")
    login(api, person.email, "set by the operator")


def test_organization_name_and_time_zone_change_by_admins_only(api, team):
    a = team["org_a"]
    changed = Api.data(api.patch(org_path(a), {"name": "Renamed", "time_zone": "Asia/Kolkata"},
                                 bearer=team["admin"].token))["organization"]
    assert (changed["name"], changed["time_zone"], changed["permalink"]) == \
        ("Renamed", "Asia/Kolkata", a)  # the permalink in URLs stays
    shown = Api.data(api.get(org_path(a), bearer=team["viewer"].token))["organization"]
    assert shown["time_zone"] == "Asia/Kolkata"
    Api.error(api.patch(org_path(a), {"name": "x"}, bearer=team["member"].token),
              403, "Forbidden")
    Api.error(api.patch(org_path(team["org_b"]), {"name": "x"}, bearer=team["admin"].token),
              404, "NotFound")
    err = Api.error(api.patch(org_path(a), {"time_zone": "Mars/Olympus"},
                              bearer=team["owner"].token), 422, "ValidationError")
    assert err["field"] == "time_zone" and "IANA" in err["message"]
    err = Api.error(api.post(f"{ADMIN}/organizations", {"name": "Z", "time_zone": "../etc/x"},
                             bearer=team["owner"].token), 422, "ValidationError")
    assert err["field"] == "time_zone"
    Api.error(api.patch(org_path(a), {"name": ""}, bearer=team["owner"].token),
              422, "ValidationError")
    assert Api.data(api.get(org_path(a), bearer=team["owner"].token))["organization"][
        "name"] == "Renamed"


@pytest.mark.postgres_only
@pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                    reason="SQLite's writers take the lock at BEGIN: a delete cannot interleave")
def test_a_change_racing_a_delete_answers_not_found(api, team, monkeypatch):
    """The organization is deleted by another request between the PATCH's read and its
    write: 404, not a 500."""
    from tests.support import all_tenants
    from chalicelib.db.models import Organization
    from chalicelib.services.organizations import organizations

    original = organizations.update_organization

    def deleted_meanwhile(db, org, **changes):
        with all_tenants() as other:
            other.delete(other.get(Organization, org.id))
        return original(db, org, **changes)

    monkeypatch.setattr(organizations, "update_organization", deleted_meanwhile)
    err = Api.error(api.patch(org_path(team["org_a"]), {"name": "Late"},
                              bearer=team["owner"].token), 404, "NotFound")
    assert "deleted meanwhile" in err["message"]
