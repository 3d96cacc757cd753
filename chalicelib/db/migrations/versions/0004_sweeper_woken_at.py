"""sweeper woken_at: one sweeper wake-up per due row until it is claimed

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 09:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('messages', sa.Column('woken_at', sa.DateTime(), nullable=True))
    op.add_column('webhook_requests', sa.Column('woken_at', sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('webhook_requests') as batch:
        batch.drop_column('woken_at')
    with op.batch_alter_table('messages') as batch:
        batch.drop_column('woken_at')
