"""Tenant isolation by PostgreSQL row-level security (db/tenancy.py, migration 0011).

Deliberately unfiltered SELECTs, run in the context the service's own authentication sets up
for a request (api/auth.py, services/organizations/lookup.py), return only that tenant's
rows; a context for no tenant reads nothing of any protected table; every table of the
metadata is either protected or listed as not a tenant's data; and the service's role cannot
bypass any of it. Without the policies each of these tests fails (the unfiltered SELECTs
would return the other tenant's rows too)."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

import chalicelib.db.models  # noqa: F401  (every table on the metadata)
from chalicelib.api import auth
from chalicelib.api.principal import ADMIN, NONE, SERVER
from chalicelib.db import session_scope, tenancy
from chalicelib.db.base import Base
from chalicelib.db.migrations.rls import ARM_NAMES
from chalicelib.db.models import (Credential, Membership, Message, Organization, Server, User,
                                  Webhook)
from chalicelib.services.organizations import lookup
from tests.support.accounts import make_user
from tests.conftest import APP_DATABASE_URL, TEST_ADMIN_KEY, TEST_DATABASE_URL
from tests.support import Api, all_tenants, make_tenant, unique

postgres_only = pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                                   reason="row-level security is PostgreSQL's")
pytestmark = [pytest.mark.postgres_only, postgres_only]

SEND = "/api/v2/server/messages"


class Request:
    """What api/auth.py reads of a request: headers (lower-case names) and the method."""

    def __init__(self, headers: dict[str, str], method: str = "GET"):
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.method = method


def _ids(db, model) -> set[int]:
    return set(db.scalars(select(model.id)))  # no WHERE: the policies alone decide


@pytest.fixture(scope="module")
def world(stack):
    """Two organizations, each with a server, a message, a webhook, its API key and an
    owner who belongs to that organization only."""
    api = Api(stack.base_url, TEST_ADMIN_KEY)
    made = {}
    for name in ("a", "b"):
        tenant = make_tenant(api)
        owner = make_user(api)
        Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                          {"user_id": owner.id, "role": "owner"}), 201)
        Api.data(api.post(tenant.server_path + "/webhooks",
                          {"name": "hook", "url": "http://127.0.0.1:9/in"}), 201)
        Api.data(api.post(SEND, {"from": f"app@{tenant.domain}", "to": ["x@example.net"],
                                 "subject": "s", "text_body": "b"},
                          server_key=tenant.api_key), 201)
        made[name] = (tenant, owner)
    with all_tenants() as db:
        found = {}
        for name, (tenant, owner) in made.items():
            org = db.scalar(select(Organization).where(Organization.permalink == tenant.org))
            server = db.scalar(select(Server).where(Server.organization_id == org.id))
            found[name] = {
                "tenant": tenant, "owner": owner, "org": org.id, "server": server.id,
                Message: set(db.scalars(select(Message.id).where(Message.server_id == server.id))),
                Credential: set(db.scalars(select(Credential.id)
                                           .where(Credential.server_id == server.id))),
                Webhook: set(db.scalars(select(Webhook.id).where(Webhook.server_id == server.id))),
                User: set(db.scalars(select(Membership.user_id)
                                     .where(Membership.organization_id == org.id)))}
    for name in found:
        assert all(found[name][model] for model in (Message, Credential, Webhook, User))
    return found


def test_the_service_role_cannot_bypass_the_policies(database):
    """The suite runs the service as its own role: not the owner, not a superuser, no
    BYPASSRLS, and it cannot turn the policies off."""
    with session_scope() as db:
        me = db.execute(text("SELECT current_user AS name, r.rolsuper, r.rolbypassrls FROM "
                             "pg_roles r WHERE r.rolname = current_user")).one()
        assert me.name == APP_DATABASE_URL.split("://")[1].split(":")[0]
        assert not me.rolsuper and not me.rolbypassrls
        owners = set(db.scalars(text("SELECT DISTINCT tableowner FROM pg_tables "
                                     "WHERE schemaname = 'public'")))
        assert me.name not in owners
    with pytest.raises(DBAPIError, match="must be owner"), session_scope() as db:
        db.execute(text("ALTER TABLE messages DISABLE ROW LEVEL SECURITY"))


def test_every_table_is_protected_or_listed_as_not_tenant_data(database):
    """A new table of the metadata without policies fails here (add them in its migration:
    chalicelib/db/migrations/rls.py), unless db/tenancy.NOT_TENANT_DATA says why not."""
    from chalicelib.db.engine import get_engine

    with get_engine(database).connect() as conn:
        flags = {name: (rls, forced) for name, rls, forced in conn.execute(text(
            "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
            "WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'"))}
        policies: dict[str, set[str]] = {}
        for table, policy in conn.execute(text(
                "SELECT tablename, policyname FROM pg_policies WHERE schemaname = 'public'")):
            policies.setdefault(table, set()).add(policy)
    assert set(tenancy.NOT_TENANT_DATA) <= set(Base.metadata.tables), "stale NOT_TENANT_DATA"
    unprotected = []
    for table in sorted(Base.metadata.tables):
        if table in tenancy.NOT_TENANT_DATA:
            assert flags[table] == (False, False) and table not in policies, table
            continue
        arms = policies.get(table, set())
        if flags.get(table) != (True, True) or not {"instance_admin", "cross_tenant"} <= arms \
                or not arms & set(ARM_NAMES):
            unprotected.append(table)
    assert not unprotected, f"tables without row-level security: {unprotected}"


def test_no_tenant_reads_nothing_of_any_protected_table(world):
    """A request without a credential (a public route) acts for nobody."""
    with session_scope() as db:
        assert auth.authenticate(NONE, Request({}), db) is None
        for table in Base.metadata.sorted_tables:
            if table.name not in tenancy.NOT_TENANT_DATA:
                assert db.scalar(select(func.count()).select_from(table)) == 0, table.name


def test_a_server_api_key_reads_only_its_server(world):
    a = world["a"]
    with session_scope() as db:
        auth.authenticate(SERVER, Request({"X-Server-API-Key": a["tenant"].api_key}), db)
        for model in (Message, Credential, Webhook):
            assert _ids(db, model) == a[model], model
        assert _ids(db, User) == set()  # a key acts for no person
        assert _ids(db, Server) == {a["server"]}
        assert _ids(db, Organization) == {a["org"]}


def test_a_member_managing_an_organization_reads_only_it(world, api):
    a, b = world["a"], world["b"]
    headers = {"Authorization": f"Bearer {a['owner'].token}"}
    with session_scope() as db:
        principal = auth.authenticate(ADMIN, Request(headers), db)
        # Before choosing an organization: the person's own rows and organizations.
        assert _ids(db, User) == {a["owner"].id}
        assert _ids(db, Organization) == {a["org"]}
        assert _ids(db, Message) == set()
        lookup.organization(db, principal, a["tenant"].org, "organization.read")
        for model in (Message, Credential, Webhook, User):
            assert _ids(db, model) == a[model], model
        assert not _ids(db, Message) & b[Message]


def test_managing_an_organization_acts_for_each_of_its_servers_and_a_new_one(world):
    """A member's organization management reaches its servers' rows through app.server_ids
    (which lists them), not a second arm on every server table (migration 0015: planning
    that arm for each table a statement reads was most of a send's cost); a server made
    while managing is acted for at once (its default stream is written next)."""
    from chalicelib.db.engine import get_engine
    from chalicelib.db.models import Stream
    from chalicelib.services.organizations import organizations

    with get_engine().connect() as conn:
        arms = set(conn.scalars(text("SELECT policyname FROM pg_policies WHERE tablename = "
                                     "'messages'")))
    assert "tenant_server" in arms and "by_organization" not in arms
    a = world["a"]
    headers = {"Authorization": f"Bearer {a['owner'].token}"}
    with session_scope() as db:
        principal = auth.authenticate(ADMIN, Request(headers), db)
        org = lookup.organization(db, principal, a["tenant"].org, "organization.read")
        assert tenancy.current(db).server_ids == (a["server"],)
        made = organizations.create_server(db, org, name=unique("made"))
        assert tenancy.current(db).server_ids == tuple(sorted((a["server"], made.id)))
        assert db.scalars(select(Stream.server_id).where(Stream.server_id == made.id)).all() \
            == [made.id]
        assert _ids(db, Message) == a[Message] and _ids(db, Server) == {a["server"], made.id}
        db.rollback()


def test_the_console_on_one_server_reads_only_that_server(world):
    a = world["a"]
    headers = {"Authorization": f"Bearer {a['owner'].token}",
               "X-Server": f"{a['tenant'].org}/{a['tenant'].server}"}
    with session_scope() as db:
        auth.authenticate(SERVER, Request(headers), db)
        for model in (Message, Credential, Webhook):
            assert _ids(db, model) == a[model], model
        assert _ids(db, User) == {a["owner"].id}


def test_an_admin_key_reads_every_tenant(world):
    a, b = world["a"], world["b"]
    with session_scope() as db:
        auth.authenticate(ADMIN, Request({"X-Admin-API-Key": TEST_ADMIN_KEY}), db)
        for model in (Message, Credential, Webhook, User):
            assert a[model] | b[model] <= _ids(db, model), model


def test_a_tenant_cannot_write_another_tenants_rows(world):
    a, b = world["a"], world["b"]
    with pytest.raises(DBAPIError, match="row-level security"), session_scope() as db:
        auth.authenticate(SERVER, Request({"X-Server-API-Key": a["tenant"].api_key}), db)
        db.add(Webhook(server_id=b["server"], name="x", url="https://x.example.com/"))
        db.flush()
    with session_scope() as db:
        auth.authenticate(SERVER, Request({"X-Server-API-Key": a["tenant"].api_key}), db)
        changed = db.execute(Webhook.__table__.update().where(
            Webhook.id.in_(b[Webhook])).values(name="taken")).rowcount
        assert changed == 0


def test_cross_tenant_work_sees_everyone_only_inside_its_block(world):
    a, b = world["a"], world["b"]
    with session_scope() as db:
        with tenancy.across_tenants(db, "sweeper"):
            assert a[Message] | b[Message] <= _ids(db, Message)
        assert _ids(db, Message) == set()
    with pytest.raises(ValueError, match="cross-tenant reason"):
        tenancy.cross_tenant(unique("made-up"))
