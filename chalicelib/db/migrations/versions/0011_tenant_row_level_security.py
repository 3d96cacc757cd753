"""tenant isolation by row-level security (PostgreSQL)

Every table holding a tenant's data gets row-level security, enabled and forced, with the
policies of db/migrations/rls.py keyed on the tenant the transaction acts for (db/tenancy.py).
The tables left out are listed, with the reason, in db/tenancy.NOT_TENANT_DATA. On a
database already in use, the release running while this deploy is under way connects as the
owner and knows no tenants: rls.bridge_for_owner keeps it working until it is replaced.
Nothing happens on SQLite.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 07:00:00
"""
from alembic import op
from sqlalchemy import text

from chalicelib.db.migrations import rls

revision = '0011'
down_revision = '0010'  # 0007 on its own; last, so it covers every table made before
branch_labels = None
depends_on = None

# A server's rows (a direct server_id column).
SERVER_TABLES = (
    "streams", "templates", "submissions", "messages", "message_events", "suppressions",
    "domains", "credentials", "routes", "idempotency_keys", "send_limit_counters",
    "bulk_jobs", "open_events", "click_events", "stat_counters", "webhooks",
    "webhook_requests", "webhook_request_logs",
    # (0012, 0014, 0013: they also carry organization_id, which follows the server's)
    "dmarc_reports", "dmarc_records", "mail_frames", "captured_messages",
)
# Rows of a parent row of a server table (no server_id of their own).
CHILD_TABLES = (
    ("message_raws", "message_id", "messages"),
    ("deliveries", "message_id", "messages"),
    ("tracked_links", "message_id", "messages"),
    ("dkim_keys", "domain_id", "domains"),
    ("api_rate_buckets", "credential_id", "credentials"),
)
# A person's rows.
PERSON_TABLES = ("user_sessions", "password_reset_tokens", "auth_events", "passkeys")
TABLES = ("organizations", "servers", "memberships", "invitations", "users", *PERSON_TABLES,
          *SERVER_TABLES, *(table for table, _, _ in CHILD_TABLES))


def upgrade() -> None:
    in_use = rls.postgres() and op.get_bind().scalar(text(
        "SELECT EXISTS (SELECT 1 FROM organizations)"))
    rls.install_functions()
    rls.protect("organizations", rls.organization_rows("id"), rls.organization_of_servers("id"),
                rls.organizations_of_person("id"))
    rls.protect("servers", rls.own_server("id"), rls.organization_rows("organization_id"))
    rls.protect("memberships", rls.organization_rows("organization_id"),
                rls.person_rows("user_id"))
    rls.protect("invitations", rls.organization_rows("organization_id"))
    rls.protect("users", rls.person_rows("id"), rls.members("id"))
    for table in PERSON_TABLES:
        rls.protect(table, rls.person_rows("user_id"))
    for table in SERVER_TABLES:
        rls.protect(table, rls.server_rows("server_id"))
    for table, column, parent in CHILD_TABLES:
        rls.protect(table, rls.parent_rows(column, parent))
    if in_use:
        for table in TABLES:
            rls.bridge_for_owner(table)


def downgrade() -> None:
    for table in reversed(TABLES):
        rls.unprotect(table)
    rls.drop_functions()
