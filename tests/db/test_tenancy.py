"""How a transaction's tenant reaches PostgreSQL (db/tenancy.py): the settings ride on the
next statement (no round trip of their own), hold for the transaction or, on an autocommit
connection, for each statement, survive a rolled-back savepoint, and still work without the
pg8000 pipeline; the two roles (db/roles.py); and the cross-tenant places, each named and
used in one module only, as docs/tenancy.md lists them."""
from __future__ import annotations

import os
import re

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import NullPool

from chalicelib.db import roles, session_scope, tenancy
from chalicelib.db.engine import autocommit_engine
from tests.conftest import APP_DATABASE_URL, TEST_DATABASE_URL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
postgres_only = pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                                   reason="row-level security is PostgreSQL's")
SETTING = text("SELECT current_setting('app.server_ids', true)")


@pytest.fixture
def flushes(monkeypatch):
    """How many times pg8000 sent something and waited for the answer (round trips), in this
    thread (the stack's sweeper and workers may be querying meanwhile)."""
    import threading

    from pg8000 import core

    count = [0]
    original = core._flush
    mine = threading.get_ident()

    def counted(sock):
        if threading.get_ident() == mine:
            count[0] += 1
        return original(sock)

    monkeypatch.setattr(core, "_flush", counted)
    return count


@postgres_only
def test_the_tenant_rides_on_the_next_statement(database, flushes):
    with session_scope() as db:
        assert db.scalar(text("SELECT 1")) == 1  # the transaction is open (BEGIN sent)
        before = flushes[0]
        tenancy.act(db, tenancy.for_server(41))
        assert db.scalar(SETTING) == "41"
        assert flushes[0] == before + 1  # one statement, one round trip
        assert db.scalar(SETTING) == "41"  # sent once per transaction
        assert flushes[0] == before + 2
        db.commit()
        assert db.scalar(SETTING) == "41"  # and again in the session's next transaction
        with tenancy.acting(db, tenancy.for_organization(7)):
            assert db.scalar(text("SELECT current_setting('app.organization_id', true)")) == "7"
            assert db.scalar(SETTING) == ""
        assert db.scalar(SETTING) == "41"


@postgres_only
def test_an_autocommit_statement_carries_its_tenant_each_time(database, flushes):
    engine = autocommit_engine()
    with tenancy.connect(engine, tenancy.for_servers([3, 5])) as conn:
        before = flushes[0]
        assert conn.execute(SETTING).scalar() == "3,5"
        assert conn.execute(SETTING).scalar() == "3,5"  # each its own transaction
        assert flushes[0] == before + 2
    with engine.connect() as conn:  # the pooled connection back, acting for nobody
        assert conn.execute(SETTING).scalar() in ("", None)


@postgres_only
def test_a_driver_cursor_acts_for_its_tenant_in_every_statement(database, flushes):
    """tenancy.cursor (the delivery marker's path past SQLAlchemy): each statement carries
    the tenant's settings in its own round trip; the pooled connection goes back acting for
    nobody; a failed statement is SQLAlchemy's DBAPIError and leaves the connection usable."""
    engine = autocommit_engine()
    assert tenancy.carries_settings(engine)
    sql = "SELECT current_setting('app.server_ids', true)"
    with tenancy.cursor(engine, tenancy.for_servers([4, 6])) as cursor:
        before = flushes[0]
        cursor.execute(sql)
        assert cursor.fetchall()[0][0] == "4,6"
        cursor.execute(sql)  # autocommit: each its own transaction, the settings again
        assert cursor.fetchall()[0][0] == "4,6"
        assert flushes[0] == before + 2
    with tenancy.cursor(engine, tenancy.NOBODY) as cursor:
        cursor.execute(sql)
        assert cursor.fetchall()[0][0] in ("", None)
    with engine.connect() as conn:  # a connection checked out without a tenant: nobody
        assert conn.execute(SETTING).scalar() in ("", None)
    with pytest.raises(DBAPIError):
        with tenancy.cursor(engine, tenancy.for_server(4)) as cursor:
            cursor.execute("SELECT 1 / 0")
    with tenancy.cursor(engine, tenancy.for_server(8)) as cursor:
        cursor.execute(sql)
        assert cursor.fetchall()[0][0] == "8"
    # A connection that dies under it (the server ended it) is invalidated, not pooled.
    with pytest.raises(DBAPIError) as raised:
        with tenancy.cursor(engine, tenancy.for_server(8)) as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            cursor.execute(sql)
    assert raised.value.connection_invalidated
    for _ in range(3):  # whichever pooled connection comes next works
        with tenancy.cursor(engine, tenancy.for_server(9)) as cursor:
            cursor.execute(sql)
            assert cursor.fetchall()[0][0] == "9"
    # Only an autocommit engine's statements are transactions of their own.
    with session_scope() as db:
        plain = db.get_bind()
    assert not tenancy.carries_settings(plain)
    with pytest.raises(ValueError):
        with tenancy.cursor(plain, tenancy.for_server(4)):
            pass


@postgres_only
def test_a_rolled_back_savepoint_keeps_the_tenant(database):
    with session_scope() as db:
        tenancy.act(db, tenancy.for_server(9))
        with pytest.raises(DBAPIError):
            with db.begin_nested():
                tenancy.act(db, tenancy.for_server(10))
                db.execute(text("SELECT 1 / 0"))
        tenancy.act(db, tenancy.for_server(9))
        assert db.scalar(SETTING) == "9"


@postgres_only
def test_without_the_pipeline_the_settings_are_statements_of_their_own(database, monkeypatch,
                                                                        flushes):
    """Another pg8000 release runs unpatched (db/engine.py): the tenant still holds."""
    from pg8000 import core

    monkeypatch.setattr(core.CoreConnection.execute_unnamed, "tenancy_prelude", False,
                        raising=False)
    engine = create_engine(APP_DATABASE_URL, pool_size=1, max_overflow=0)
    factory = sessionmaker(engine)
    tenancy.install(engine, factory)
    autocommit = create_engine(APP_DATABASE_URL, isolation_level="AUTOCOMMIT", pool_size=1,
                               max_overflow=0)
    tenancy.install(autocommit, None)
    try:
        with factory() as db:
            tenancy.act(db, tenancy.for_server(12))
            before = flushes[0]
            assert db.scalar(SETTING) == "12"
            assert flushes[0] > before + 1  # BEGIN, the settings, the statement
            db.commit()
        with autocommit.connect() as conn:
            tenancy.act(conn, tenancy.for_server(13))
            assert conn.execute(SETTING).scalar() == "13"
        with autocommit.connect() as conn:  # session-level settings cleared again
            assert conn.execute(SETTING).scalar() == ""
    finally:
        engine.dispose()
        autocommit.dispose()


def test_every_cross_tenant_place_is_named_and_used_in_its_module_only():
    calls = re.compile(r"(?:across_tenants\(\s*\w+\s*,|cross_tenant\()\s*(\"[^\"]*\"|\S)")
    used: dict[str, set[str]] = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "chalicelib")):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT)
            if not name.endswith(".py") or rel == "chalicelib/db/tenancy.py":
                continue
            with open(path, encoding="utf-8") as fh:
                for match in calls.finditer(fh.read()):
                    reason = match.group(1)
                    assert reason.startswith('"'), f"{rel}: name the reason as a literal"
                    used.setdefault(reason.strip('"'), set()).add(rel)
    assert set(used) == set(tenancy.CROSS_TENANT)
    for reason, (module, _) in tenancy.CROSS_TENANT.items():
        assert used[reason] == {module}, reason


def test_the_docs_list_every_cross_tenant_place_and_every_table_left_out():
    with open(os.path.join(ROOT, "docs", "tenancy.md"), encoding="utf-8") as fh:
        page = fh.read()
    missing = [f"`{name}`" for name in (*tenancy.CROSS_TENANT, *tenancy.NOT_TENANT_DATA)
               if f"`{name}`" not in page]
    assert not missing, f"docs/tenancy.md does not list {missing}"


@postgres_only
def test_a_role_that_could_bypass_the_policies_is_refused(database):
    """The migrate step will not grant a superuser, a BYPASSRLS role or the owner; the start
    banner warns when the service connects as one."""
    name = f"{make_url(TEST_DATABASE_URL).database}_bypass"
    owner = create_engine(TEST_DATABASE_URL)
    with owner.begin() as conn:
        conn.execute(text(f'DROP ROLE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE ROLE "{name}" LOGIN BYPASSRLS'))
    try:
        bypassing = make_url(APP_DATABASE_URL).set(username=name).render_as_string(False)
        with pytest.raises(roles.RoleError, match="BYPASSRLS"):
            roles.ensure_app_role(TEST_DATABASE_URL, bypassing)
    finally:
        with owner.begin() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{name}"'))
        owner.dispose()
    with pytest.raises(roles.RoleError, match="same database"):
        roles.check_urls(TEST_DATABASE_URL,
                         make_url(APP_DATABASE_URL).set(database="other").render_as_string(False))
    assert roles.warnings(APP_DATABASE_URL) == []
    assert roles.warnings(TEST_DATABASE_URL)  # the owner (here a superuser too)


@postgres_only
def test_the_bridge_admits_only_an_owner_that_names_no_tenant(database):
    """Migration 0011 on a database in use: the release being replaced connects as the owner
    and sets no app.* at all; it keeps reading until the deploy replaces it. This release's
    code always names a tenant (nobody included), so the bridge never admits it."""
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    from chalicelib.db.migrations import rls

    owner = f"{make_url(TEST_DATABASE_URL).database}_owner_probe"
    engine = create_engine(TEST_DATABASE_URL, poolclass=NullPool)
    tenancy.install(engine, None)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS bridge_probe"))
        conn.execute(text(f'DROP ROLE IF EXISTS "{owner}"'))
        conn.execute(text(f'CREATE ROLE "{owner}" NOLOGIN'))
        conn.execute(text(f'GRANT CREATE, USAGE ON SCHEMA public TO "{owner}"'))
        conn.execute(text(f'GRANT SELECT ON servers TO "{owner}"'))
        conn.execute(text(f'SET ROLE "{owner}"'))  # a non-superuser owner, as on RDS
        conn.execute(text("CREATE TABLE bridge_probe (server_id integer)"))
        conn.execute(text("INSERT INTO bridge_probe VALUES (1), (2)"))
        with Operations.context(MigrationContext.configure(conn)):
            rls.protect("bridge_probe", rls.server_rows("server_id"))
            rls.bridge_for_owner("bridge_probe")
    try:
        count = text("SELECT count(*) FROM bridge_probe")
        with create_engine(TEST_DATABASE_URL, poolclass=NullPool).begin() as conn:
            conn.execute(text(f'SET LOCAL ROLE "{owner}"'))
            assert conn.execute(count).scalar() == 2  # the previous release: no app.* at all
        with engine.begin() as conn:
            conn.execute(text(f'SET LOCAL ROLE "{owner}"'))
            assert conn.execute(count).scalar() == 0  # this release, acting for nobody
        with engine.begin() as conn:
            conn.execute(text(f'SET LOCAL ROLE "{owner}"'))
            tenancy.act(conn, tenancy.for_server(1))
            assert conn.execute(text("SELECT count(*) FROM bridge_probe")).scalar() == 1
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS bridge_probe"))
            conn.execute(text(f'REVOKE ALL ON SCHEMA public FROM "{owner}"'))
            conn.execute(text(f'REVOKE ALL ON servers FROM "{owner}"'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{owner}"'))
        engine.dispose()
