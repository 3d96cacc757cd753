"""Row-level security for a tenant table, as one line of a migration (PostgreSQL; nothing on
SQLite, which keeps the application's filters only).

A new table holding a server's rows (it carries ``server_id``)::

    from chalicelib.db.migrations import rls

    def upgrade():
        op.create_table("tls_reports", ...)
        rls.protect("tls_reports", rls.server_rows("server_id"))

    def downgrade():
        rls.unprotect("tls_reports")
        op.drop_table("tls_reports")

and for an organization's rows ``rls.organization_rows("organization_id")``, a person's
``rls.person_rows("user_id")``, rows that belong to a parent row of a protected table
``rls.parent_rows("message_id", "messages")``. ``protect`` enables and FORCES row-level
security (the table owner is bound too) and adds, besides the arms given, the policies
``instance_admin`` and ``cross_tenant``. Each arm is one permissive policy (they are OR'ed).
``tenant_*`` arms compare a column with a setting; ``by_*`` arms reach the tenant through
another table:

* ``tenant_server``: the row's server is one the transaction acts for (``app.server_ids``);
* ``tenant_organization``: the row is the organization's being managed
  (``app.organization_id``);
* ``tenant_user``: the row is the signed-in person's (``app.user_id``);
* ``instance_admin`` / ``cross_tenant``: ``app.scope`` says so (db/tenancy.py);
* ``by_organization``: (``users``) one of the managed organization's members' accounts;
* ``by_server`` / ``by_user`` (``organizations``): the organization of a server acted for /
  one the signed-in person belongs to;
* ``by_parent``: the parent row is visible (the parent's policies decide).

Cost, since pg8000's unnamed statements are planned every time: each setting is read with
built-in functions in a scalar sub-select, evaluated once per statement (an InitPlan) and
cheap to plan; ``app.scope`` is compared per row instead, but only for rows the ``tenant_*``
arms did not admit. The ``by_*`` arms' other tables are read by ``tenant_*()`` functions that
return arrays, run once per statement and only when their arm is reached. PostgreSQL 15 ORs
a table's policies in descending name order and stops at the first true one: ``tenant_*``
(the hot path of a request), then ``instance_admin`` and ``cross_tenant``, then ``by_*``, so
cross-tenant work never pays a ``by_parent`` sub-select per row.
"""
from __future__ import annotations

from alembic import op
from sqlalchemy import text

FUNCTIONS = {
    # The settings, by name (for the functions below and for psql: the policies read them
    # directly, see _setting).
    "tenant_scope": ("text", "SELECT coalesce(current_setting('app.scope', true), '')"),
    "tenant_server_ids": ("integer[]", "SELECT string_to_array(nullif(current_setting("
                                       "'app.server_ids', true), ''), ',')::integer[]"),
    "tenant_organization_id": ("integer", "SELECT nullif(current_setting("
                                          "'app.organization_id', true), '')::integer"),
    "tenant_user_id": ("integer", "SELECT nullif(current_setting('app.user_id', true), "
                                  "'')::integer"),
    # What the settings open in other tables, as arrays (an aggregate: never inlined, so a
    # policy using one is planned as cheaply as a constant; run once per statement, and only
    # when its arm is reached). They read as the caller: those tables' own policies apply.
    "tenant_organization_servers": ("integer[]", "SELECT array_agg(s.id) FROM servers s "
                                                 "WHERE s.organization_id = "
                                                 "tenant_organization_id()"),
    "tenant_organization_members": ("integer[]", "SELECT array_agg(m.user_id) FROM "
                                                 "memberships m WHERE m.organization_id = "
                                                 "tenant_organization_id()"),
    "tenant_server_organizations": ("integer[]", "SELECT array_agg(s.organization_id) FROM "
                                                 "servers s WHERE s.id = "
                                                 "ANY (tenant_server_ids())"),
    "tenant_user_organizations": ("integer[]", "SELECT array_agg(m.organization_id) FROM "
                                               "memberships m WHERE m.user_id = "
                                               "tenant_user_id()"),
}


def _setting(name: str, cast: str) -> str:
    """A setting as a scalar sub-select of built-in functions: evaluated once per statement
    (an InitPlan) and cheap to plan (a SQL function here would be parsed again each time a
    statement is planned, which pg8000's unnamed statements are every time)."""
    if cast == "integer[]":  # cast outside: ANY then reads an array, not a set of rows
        return f"(SELECT string_to_array(nullif(current_setting('{name}', true), ''), ','))" \
               f"::integer[]"
    return f"(SELECT nullif(current_setting('{name}', true), '')::{cast})"


def _array(function: str) -> str:
    # The cast makes ANY read an array (a bare sub-SELECT there would be a set of rows).
    return f"(SELECT {function}())::integer[]"


SERVER_IDS = _setting("app.server_ids", "integer[]")
ORGANIZATION_ID = _setting("app.organization_id", "integer")
USER_ID = _setting("app.user_id", "integer")
SCOPE = "coalesce(current_setting('app.scope', true), '')"  # per row: see the module doc

ALWAYS = (("instance_admin", f"{SCOPE} = 'instance_admin'"),
          ("cross_tenant", f"{SCOPE} = 'cross_tenant'"))
ARM_NAMES = ("tenant_server", "tenant_organization", "tenant_user", "by_organization",
             "by_server", "by_user", "by_parent")


def postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def install_functions() -> None:
    if not postgres():
        return
    for name, (returns, body) in FUNCTIONS.items():
        op.execute(f"CREATE OR REPLACE FUNCTION {name}() RETURNS {returns} LANGUAGE sql "
                   f"STABLE PARALLEL SAFE AS $$ {body} $$")


def drop_functions() -> None:
    """Drop the functions above and every parent's ``tenant_sees_*`` (migration 0011's
    downgrade, after every table's ``unprotect``)."""
    if not postgres():
        return
    for name in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    for (name,) in op.get_bind().execute(text(
            "SELECT proname FROM pg_proc WHERE proname LIKE 'tenant\\_sees\\_%' "
            "AND pronamespace = current_schema()::regnamespace")):
        op.execute(f"DROP FUNCTION IF EXISTS {name}(bigint)")


def own_server(column: str = "id") -> list[tuple[str, str]]:
    """The server row itself (the ``servers`` table)."""
    return [("tenant_server", f"{column} = ANY ({SERVER_IDS})")]


def server_rows(column: str = "server_id") -> list[tuple[str, str]]:
    """A server's rows: seen when acting for the server. Managing its organization acts for
    every server of it (``app.server_ids``: db/tenancy.enter_organization), so there is no
    second arm: migration 0015 dropped it, being most of what the policies cost a send."""
    return own_server(column)


def organization_servers(column: str = "server_id") -> list[tuple[str, str]]:
    """The arm ``server_rows`` had until migration 0015 (its downgrade puts it back)."""
    return [("by_organization", f"{column} = ANY ({_array('tenant_organization_servers')})")]


def organization_rows(column: str = "organization_id") -> list[tuple[str, str]]:
    """An organization's rows: seen when managing it."""
    return [("tenant_organization", f"{column} = {ORGANIZATION_ID}")]


def person_rows(column: str = "user_id") -> list[tuple[str, str]]:
    """A person's rows: seen by that person."""
    return [("tenant_user", f"{column} = {USER_ID}")]


def parent_rows(column: str, parent: str) -> list[tuple[str, str]]:
    """Rows of a parent row (``column`` references ``parent``.id, a protected table): seen
    whenever the parent row is. Asked through ``tenant_sees_<parent>(id)``, a PL/pgSQL
    function created here: its query's plan is cached for the session, where an EXISTS
    sub-select would add the parent's policies to the plan of every statement."""
    if postgres():
        _parent_function(parent)
    return [("by_parent", f"tenant_sees_{parent}({column})")]


def _parent_function(parent: str) -> None:
    op.execute(f"CREATE OR REPLACE FUNCTION tenant_sees_{parent}(parent_id bigint) "
               f"RETURNS boolean LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$ BEGIN "
               f"RETURN EXISTS (SELECT 1 FROM {parent} WHERE id = parent_id); END $$")


def members(column: str = "id") -> list[tuple[str, str]]:
    """Accounts (``users``) of the organization being managed."""
    return [("by_organization", f"{column} = ANY ({_array('tenant_organization_members')})")]


def organization_of_servers(column: str = "id") -> list[tuple[str, str]]:
    """The organization (``organizations``) of the servers acted for."""
    return [("by_server", f"{column} = ANY ({_array('tenant_server_organizations')})")]


def organizations_of_person(column: str = "id") -> list[tuple[str, str]]:
    """The organizations (``organizations``) the signed-in person belongs to."""
    return [("by_user", f"{column} = ANY ({_array('tenant_user_organizations')})")]


def protect(table: str, *arms: list[tuple[str, str]]) -> None:
    """Enable and force row-level security on ``table`` with the given arms (see above)."""
    if not postgres():
        return
    merged: dict[str, list[str]] = {}
    for name, expression in (pair for arm in arms for pair in arm):
        if name not in ARM_NAMES:
            raise ValueError(f"unknown policy arm {name!r}")
        merged.setdefault(name, []).append(f"({expression})")
    if not merged:
        raise ValueError(f"{table}: protect() needs at least one arm saying whose rows they are")
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    for name, expression in ALWAYS:
        op.execute(f"CREATE POLICY {name} ON {table} USING ({expression})")
    for name, expressions in merged.items():
        op.execute(f"CREATE POLICY {name} ON {table} USING ({' OR '.join(expressions)})")


BRIDGE = "before_tenancy"


def bridge_for_owner(table: str) -> None:
    """Migration 0011 only, on a database already in use: the functions and the SMTP gateway
    of the release deployed before connect as the tables' owner and set no ``app.*`` at all.
    FORCE binds them too, so until the deploy in progress replaces them they would read
    nothing; this policy (evaluated last: its name sorts lowest) admits the owner while
    ``app.scope`` is empty. This release's code sets ``app.scope`` in every transaction
    (db/tenancy.py), and the service's own role is not the owner, so it admits neither. A
    later release drops it: ``DROP POLICY before_tenancy ON <table>``."""
    if not postgres():
        return
    owner = op.get_bind().scalar(text("SELECT quote_literal(current_user)"))
    op.execute(f"CREATE POLICY {BRIDGE} ON {table} USING "
               f"((SELECT current_user = {owner} AND {SCOPE} = ''))")


def unprotect(table: str) -> None:
    """Undo ``protect`` (a downgrade)."""
    if not postgres():
        return
    for name in (*(n for n, _ in ALWAYS), *ARM_NAMES, BRIDGE):
        op.execute(f"DROP POLICY IF EXISTS {name} ON {table}")
    op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
