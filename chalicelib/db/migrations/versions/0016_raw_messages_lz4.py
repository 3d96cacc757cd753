"""raw messages compressed with lz4 instead of pglz

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 14:00:00

Every accepted message stores its raw source once (``submissions.raw``; inbound copies in
``message_raws.raw``). PostgreSQL compresses such values with pglz by default: ~50-80 us of
the database's CPU for a 10 KB message, against ~5 us with lz4 (the same rows inserted both
ways on the bench machine), a measurable share of what the SMTP gateway's commits cost the
database (bench/RESULTS.md, "SMTP gateway"). Only rows written from now on are compressed
with lz4; old rows are read as they are. PostgreSQL 14 and later built with lz4 (Debian's
and RDS's are) know the method; elsewhere nothing changes.
"""
from alembic import op
from sqlalchemy import text

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None

COLUMNS = (("submissions", "raw"), ("message_raws", "raw"))


def _lz4_available() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or bind.dialect.server_version_info < (14,):
        return False
    # The server's build: 'lz4' is a valid value of the setting only when compiled in.
    return bool(bind.execute(text(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
        "WHERE name = 'default_toast_compression'")).scalar())


def upgrade() -> None:
    if not _lz4_available():
        return
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION lz4")


def downgrade() -> None:
    if not _lz4_available():
        return
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION pglz")
