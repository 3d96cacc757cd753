"""Schema migrations with Alembic, callable from code (local start, tests, the deploy step).

``prepare`` is what a start or a deploy runs: the schema to head as the owner of the tables
(DATABASE_OWNER_URL, else DATABASE_URL), then, when the two differ, the service's role made
and granted (db/roles.py)."""
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


def owner_url(settings=None) -> str:
    settings = settings or get_settings()
    return settings.database_owner_url or settings.database_url


def prepare(settings=None) -> list[str]:
    """Migrate to head as the owner and let the service's role in; returns warnings (the
    service's role is not bound by row-level security)."""
    from chalicelib.db import roles

    settings = settings or get_settings()
    owner = owner_url(settings)
    two_roles = owner != settings.database_url and \
        not roles.same_role(owner, settings.database_url)
    if two_roles:
        roles.check_urls(owner, settings.database_url)
    upgrade(owner)
    if two_roles:
        from chalicelib.db.engine import get_engine

        roles.ensure_app_role(owner, settings.database_url)
        get_engine(owner).dispose()  # the owner's connections are not needed after this
    return roles.warnings(settings.database_url)


def main() -> None:
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "head"
    if target == "head":
        for line in prepare():
            print(f"WARNING: {line}")
    else:
        upgrade(owner_url(), revision=target)
    print(f"database migrated to {target}")


if __name__ == "__main__":
    main()
