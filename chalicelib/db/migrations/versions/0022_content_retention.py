"""content retention and erased content

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 04:10:00

Issue 35, items 4 and 5: ``servers.content_retention_days`` (how long a server keeps its
messages' content, the raw source and the signed copy; the record stays for
``message_retention_days``) and ``messages.content_expired_at`` (when the message's content
was erased, by content retention or by a data removal; NULL while it is kept).
Expand-only: both columns have server defaults or are nullable.
"""
from alembic import op
import sqlalchemy as sa


revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('servers', sa.Column('content_retention_days', sa.Integer(),
                                       server_default='45', nullable=False))
    op.add_column('messages', sa.Column('content_expired_at', sa.DateTime(), nullable=True))
    # Existing servers that keep their records less than 45 days keep content as long.
    op.execute("UPDATE servers SET content_retention_days = message_retention_days "
               "WHERE message_retention_days < content_retention_days")


def downgrade() -> None:
    op.drop_column('messages', 'content_expired_at')
    op.drop_column('servers', 'content_retention_days')
