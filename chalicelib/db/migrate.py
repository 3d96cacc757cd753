"""Schema migrations with Alembic, callable from code (local start, tests, the deploy step)."""
from __future__ import annotations

import os

from alembic import command
from alembic.config import Config

from chalicelib.config import get_settings

MIGRATIONS_DIR = os.path.join(os.path.dirname(__file__), "migrations")


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", MIGRATIONS_DIR)
    config.attributes["database_url"] = url or get_settings().database_url
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def main() -> None:
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "head"
    upgrade(revision=target)
    print(f"database migrated to {target}")


if __name__ == "__main__":
    main()
