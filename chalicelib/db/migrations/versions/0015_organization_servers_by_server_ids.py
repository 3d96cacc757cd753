"""an organization's management reaches its servers' rows through app.server_ids

Revision ID: 0015
Revises: 0011
Create Date: 2026-11-26 10:30:00

Every table of a server's rows had two arms: ``tenant_server`` (app.server_ids) and
``by_organization`` (the row's server is one of the managed organization's). Planning the
second for every table a statement reads was ~35% of what the policies cost a send
(bench/RESULTS.md, "Row-level security"), though only organization management ever needs
it. That management now lists the organization's servers in app.server_ids
(db/tenancy.enter_organization), so the arm goes. ``users`` keeps its ``by_organization``
(the organization's members), which is not a server's row.
"""
from alembic import op
from sqlalchemy import text

from chalicelib.db.migrations import rls

revision = '0015'
down_revision = '0011'
branch_labels = None
depends_on = None


def _server_tables() -> list[str]:
    """The tables with a server arm besides ``servers`` itself (the server tables and
    whichever a later migration protects alike)."""
    return [table for (table,) in op.get_bind().execute(text(
        "SELECT tablename FROM pg_policies WHERE schemaname = current_schema() "
        "AND policyname = 'tenant_server' AND tablename <> 'servers' ORDER BY tablename"))]


def upgrade() -> None:
    if not rls.postgres():
        return
    for table in _server_tables():
        op.execute(f"DROP POLICY IF EXISTS by_organization ON {table}")


def downgrade() -> None:
    if not rls.postgres():
        return
    for table in _server_tables():
        [(name, expression)] = rls.organization_servers()
        op.execute(f"CREATE POLICY {name} ON {table} USING ({expression})")
