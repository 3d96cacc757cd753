"""Row-level security for a tenant table, as one line of a migration (PostgreSQL; nothing on
SQLite, which keeps the application's filters only).

A new table holding a server's rows (it carries ``server_id``)::

    from chalicelib.db.migrations import rls

    def upgrade():
        op.create_table("dmarc_reports", ...)
        rls.protect("dmarc_reports", rls.server_rows("server_id"))

    def downgrade():
        rls.unprotect("dmarc_reports")
        op.drop_table("dmarc_reports")

and for an organization's rows ``rls.organization_rows("organization_id")``, a person's
``rls.person_rows("user_id")``, rows that belong to a parent row of a protected table
``rls.parent_rows("message_id", "messages")``. ``protect`` enables and FORCES row-level
security (the table owner is bound too) and adds, besides the arms given, the policies
``instance_admin`` and ``cross_tenant``. Each arm is one permissive policy (they are OR'ed):

* ``by_server``: the row's server is one the transaction acts for (``app.server_ids``);
* ``by_organization``: the row belongs to the organization being managed
  (``app.organization_id``), directly or through one of its servers;
* ``by_user``: the row is the signed-in person's (``app.user_id``);
* ``by_parent``: the parent row is visible (the parent's policies decide);
* ``instance_admin`` / ``cross_tenant``: ``app.scope`` says so (db/tenancy.py).

The settings are read through the ``tenant_*()`` functions, each wrapped in a scalar
sub-SELECT so that PostgreSQL evaluates it once per statement (an InitPlan), not per row.
PostgreSQL ORs a table's policies in descending name order (PostgreSQL 15: the relation
cache lists them so) and stops at the first true one: ``instance_admin`` and
``cross_tenant`` (a constant per statement) come first, so cross-tenant work never pays a
``by_parent`` sub-select per row; then ``by_user``, ``by_server`` (the hot path of a
request), ``by_parent``, ``by_organization``.
"""
from __future__ import annotations

from alembic import op
from sqlalchemy import text

FUNCTIONS = {
    "tenant_scope": ("text", "SELECT coalesce(current_setting('app.scope', true), '')"),
    "tenant_server_ids": ("integer[]", "SELECT string_to_array(nullif(current_setting("
                                       "'app.server_ids', true), ''), ',')::integer[]"),
    "tenant_organization_id": ("integer", "SELECT nullif(current_setting("
                                          "'app.organization_id', true), '')::integer"),
    "tenant_user_id": ("integer", "SELECT nullif(current_setting('app.user_id', true), "
                                  "'')::integer"),
}

# The cast makes ANY read an array (a bare sub-SELECT there would be a set of rows).
SERVER_IDS = "(SELECT tenant_server_ids())::integer[]"
ORGANIZATION_ID = "(SELECT tenant_organization_id())"
USER_ID = "(SELECT tenant_user_id())"
SCOPE = "(SELECT tenant_scope())"

ALWAYS = (("instance_admin", f"{SCOPE} = 'instance_admin'"),
          ("cross_tenant", f"{SCOPE} = 'cross_tenant'"))
ARM_NAMES = ("by_server", "by_organization", "by_user", "by_parent")


def postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def install_functions() -> None:
    if not postgres():
        return
    for name, (returns, body) in FUNCTIONS.items():
        op.execute(f"CREATE OR REPLACE FUNCTION {name}() RETURNS {returns} LANGUAGE sql "
                   f"STABLE PARALLEL SAFE AS $$ {body} $$")


def drop_functions() -> None:
    if not postgres():
        return
    for name in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {name}()")


def own_server(column: str = "id") -> list[tuple[str, str]]:
    """The server row itself (the ``servers`` table)."""
    return [("by_server", f"{column} = ANY ({SERVER_IDS})")]


def server_rows(column: str = "server_id") -> list[tuple[str, str]]:
    """A server's rows: seen when acting for the server, or managing its organization."""
    return own_server(column) + [(
        "by_organization",
        f"{ORGANIZATION_ID} IS NOT NULL AND {column} IN "
        f"(SELECT s.id FROM servers s WHERE s.organization_id = {ORGANIZATION_ID})")]


def organization_rows(column: str = "organization_id") -> list[tuple[str, str]]:
    """An organization's rows: seen when managing it."""
    return [("by_organization", f"{column} = {ORGANIZATION_ID}")]


def person_rows(column: str = "user_id") -> list[tuple[str, str]]:
    """A person's rows: seen by that person."""
    return [("by_user", f"{column} = {USER_ID}")]


def parent_rows(column: str, parent: str) -> list[tuple[str, str]]:
    """Rows of a parent row (``column`` references ``parent``.id, a protected table): seen
    whenever the parent row is."""
    return [("by_parent",
             f"EXISTS (SELECT 1 FROM {parent} p WHERE p.id = {{table}}.{column})")]


def members(column: str = "id") -> list[tuple[str, str]]:
    """Accounts (``users``) of the organization being managed."""
    return [("by_organization",
             f"{ORGANIZATION_ID} IS NOT NULL AND {column} IN (SELECT m.user_id FROM "
             f"memberships m WHERE m.organization_id = {ORGANIZATION_ID})")]


def organization_of_servers(column: str = "id") -> list[tuple[str, str]]:
    """The organization (``organizations``) of the servers acted for."""
    return [("by_server", f"{column} IN (SELECT s.organization_id FROM servers s "
                              f"WHERE s.id = ANY ({SERVER_IDS}))")]


def organizations_of_person(column: str = "id") -> list[tuple[str, str]]:
    """The organizations (``organizations``) the signed-in person belongs to."""
    return [("by_user", f"{column} IN (SELECT m.organization_id FROM memberships m "
                            f"WHERE m.user_id = {USER_ID})")]


def protect(table: str, *arms: list[tuple[str, str]]) -> None:
    """Enable and force row-level security on ``table`` with the given arms (see above)."""
    if not postgres():
        return
    merged: dict[str, list[str]] = {}
    for name, expression in (pair for arm in arms for pair in arm):
        if name not in ARM_NAMES:
            raise ValueError(f"unknown policy arm {name!r}")
        merged.setdefault(name, []).append(f"({expression.format(table=table)})")
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
               f"((SELECT current_user = {owner} AND tenant_scope() = ''))")


def unprotect(table: str) -> None:
    """Undo ``protect`` (a downgrade)."""
    if not postgres():
        return
    for name in (*(n for n, _ in ALWAYS), *ARM_NAMES, BRIDGE):
        op.execute(f"DROP POLICY IF EXISTS {name} ON {table}")
    op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
