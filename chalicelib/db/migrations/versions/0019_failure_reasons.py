"""failure reasons, the suppression policy's state

Revision ID: 0019
Revises: 0016
Create Date: 2026-11-29 10:00:00

Every failed attempt and bounce gets a reason from the failure taxonomy
(``services/failures/``) beside its coarse category: ``deliveries.reason`` and
``messages.bounce_reason``. A suppression added by a failure keeps its reason and the message
it came from (``suppressions.bounce_reason``, ``suppressions.message_id``). Failures that
suppress only when repeated over days (a mailbox full, disabled, a relay's expiry) are counted
per server and address in ``recipient_failures`` (a tenant table: row-level security).
Existing rows keep NULL: nothing is guessed for them.
"""
import sqlalchemy as sa
from alembic import op

from chalicelib.db.migrations import rls

revision = '0019'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("reason", sa.String(32), nullable=True))
    op.add_column("messages", sa.Column("bounce_reason", sa.String(32), nullable=True))
    op.add_column("suppressions", sa.Column("bounce_reason", sa.String(32), nullable=True))
    op.add_column("suppressions", sa.Column("message_id", sa.BigInteger(), nullable=True))
    op.create_table(
        "recipient_failures",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("server_id", sa.Integer(), sa.ForeignKey("servers.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("first_failed_at", sa.DateTime(), nullable=False),
        sa.Column("last_failed_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("server_id", "address", name="uq_recipient_failures_server_address"),
    )
    op.create_index("ix_recipient_failures_server_id", "recipient_failures", ["server_id"])
    rls.protect("recipient_failures", rls.server_rows("server_id"))


def downgrade() -> None:
    rls.unprotect("recipient_failures")
    op.drop_index("ix_recipient_failures_server_id", table_name="recipient_failures")
    op.drop_table("recipient_failures")
    op.drop_column("suppressions", "message_id")
    op.drop_column("suppressions", "bounce_reason")
    op.drop_column("messages", "bounce_reason")
    op.drop_column("deliveries", "reason")
