"""Deploy-time tasks: bring the database schema to head and seed the operator's admin key.

Runs as the ``migrate`` Lambda function (``app.py``), which ``infra/deploy.sh`` updates to the
new code and invokes BEFORE ``chalice deploy`` switches the API and workers over, and locally
as ``python -m chalicelib.ops migrate``. Idempotent: running it twice changes nothing."""
from __future__ import annotations

import sys


def migrate() -> dict:
    from alembic.runtime.migration import MigrationContext

    from chalicelib.config import get_settings
    from chalicelib.db import migrate as db_migrate
    from chalicelib.db import session_scope
    from chalicelib.db.engine import get_engine
    from chalicelib.services import admin_keys, keys

    settings = get_settings()
    db_migrate.upgrade(settings.database_url)
    keys.signing_key()  # fails loudly now, not at the first webhook, when the key is unusable
    seeded = False
    if settings.admin_api_key:
        with session_scope() as db:
            admin_keys.seed_key(db, settings.admin_api_key)
        seeded = True
    with get_engine().connect() as conn:
        revision = MigrationContext.configure(conn).get_current_revision()
    return {"revision": revision, "admin_key_seeded": seeded}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["migrate"]:
        print("usage: python -m chalicelib.ops migrate", file=sys.stderr)
        return 2
    from chalicelib import aws_bootstrap

    aws_bootstrap.load_once(force=True)
    print(migrate())
    return 0


if __name__ == "__main__":
    sys.exit(main())
