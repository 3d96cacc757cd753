"""message content in the content store: key, size and sha256 columns (expand only)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 04:20:00

Issue 35, items 1-3. ``submissions`` and ``message_raws`` get ``content_key`` (the store's
key; "" while the bytes are still in ``raw``, "expired" once erased) and ``content_sha256``
(``message_raws`` also its ``size``), all with server defaults, and an index on the key (the
orphan sweep and erasure ask which rows name a key; the backfill finds the rows still "").
``raw`` becomes nullable: new rows keep their bytes in the store. Expand only: the old
``raw`` columns stay, read while a row is not yet moved (the backfill moves them:
docs/operating.md); a later release drops them.
"""
from alembic import op
import sqlalchemy as sa

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None

TABLES = ("submissions", "message_raws")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('content_key', sa.String(length=80), server_default='',
                                          nullable=False))
            batch_op.add_column(sa.Column('content_sha256', sa.String(length=64),
                                          server_default='', nullable=False))
            if table == "message_raws":
                batch_op.add_column(sa.Column('size', sa.Integer(), server_default='0',
                                              nullable=False))
            batch_op.alter_column('raw', existing_type=sa.LargeBinary(), nullable=True)
            batch_op.create_index(batch_op.f(f'ix_{table}_content_key'), ['content_key'],
                                  unique=False)


def downgrade() -> None:
    # Rows written since keep their bytes only in the store: going down first needs them
    # copied back, which this does not do (content written since would read as missing).
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f(f'ix_{table}_content_key'))
            batch_op.alter_column('raw', existing_type=sa.LargeBinary(), nullable=False)
            if table == "message_raws":
                batch_op.drop_column('size')
            batch_op.drop_column('content_sha256')
            batch_op.drop_column('content_key')
