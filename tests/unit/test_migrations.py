"""Migrations create the schema the models describe, on PostgreSQL and SQLite, and go down
and up again cleanly."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

import chalicelib.db.models  # noqa: F401
from chalicelib.db import migrate
from chalicelib.db.base import Base


def test_migrated_schema_matches_the_models(database):
    engine = create_engine(database)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                 Base.metadata)
    engine.dispose()
    assert diffs == [], "models changed without a migration: run `make migration m='what changed'`"


def test_downgrade_to_empty_and_upgrade_again(tmp_path):
    url = f"sqlite:///{tmp_path}/updown.db"
    migrate.upgrade(url)
    engine = create_engine(url)
    assert "messages" in inspect(engine).get_table_names()
    migrate.downgrade(url, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    migrate.upgrade(url)
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    engine.dispose()
