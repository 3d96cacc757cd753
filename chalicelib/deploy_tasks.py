"""Deploy-time tasks: bring the database schema to head as the owner of the tables
(DATABASE_OWNER_URL), create or update the service's role (DATABASE_URL's user and password)
and grant it row access, seed the operator's admin key; rotate the installation signing key
(``signing-key show|rotate|activate``); move message content written before the content
store into it (``content-backfill``).

Runs as the ``migrate`` Lambda function (``app.py``), which ``infra/deploy.sh`` updates to the
new code and invokes BEFORE ``chalice deploy`` switches the API and workers over, and locally
as ``python -m chalicelib.deploy_tasks migrate``. Idempotent: running it twice changes nothing."""
from __future__ import annotations

import sys


def migrate() -> dict:
    from alembic.runtime.migration import MigrationContext

    from chalicelib.config import get_settings
    from chalicelib.db import migrate as db_migrate
    from chalicelib.db import session_scope
    from chalicelib.db.engine import get_engine
    from chalicelib.services.accounts import admin_keys
    from chalicelib.services.security import keys

    settings = get_settings()
    warnings = db_migrate.prepare(settings)
    keys.signing_key()  # fails loudly now, not at the first webhook, when the key is unusable
    seeded, revoked = False, []
    if settings.admin_api_key:
        with session_scope() as db:
            _, previous = admin_keys.seed_key(db, settings.admin_api_key)
            revoked = [k.key_hint for k in previous]
        seeded = True
    with get_engine(db_migrate.owner_url(settings)).connect() as conn:
        revision = MigrationContext.configure(conn).get_current_revision()
    return {"revision": revision, "admin_key_seeded": seeded,
            "previous_seeded_keys_revoked": revoked,
            "warnings": warnings + keys.startup_warnings(settings)}


SIGNING_KEY_ACTIONS = ("show", "rotate", "activate")


def content_backfill(max_batches: int | None = None) -> dict:
    """Move the content of rows written before the content store (migration 0021) out of
    the database into it, CONTENT_BACKFILL_BATCH rows per committed batch, until none is
    left (or ``max_batches`` ran: the retention run and a Lambda invocation stop there and
    the next call resumes). Safe while the service runs, and to run again."""
    import itertools

    from chalicelib.config import get_settings
    from chalicelib.db import session_scope
    from chalicelib.services import content

    batch = get_settings().content_backfill_batch
    moved = batches = 0
    for batches in itertools.count(1):
        with session_scope() as db:
            done = content.backfill(db, limit=batch)
        moved += done
        if done < batch or (max_batches is not None and batches >= max_batches):
            break
    with session_scope() as db:
        left = content.legacy_left(db)
    return {"moved": moved, "batches": batches, "left": left}


def signing_key(action: str) -> dict:
    """The installation signing key (services/security/installation_keys.py): ``show`` lists the keys
    to publish, ``rotate`` adds a pending one, ``activate`` makes it sign (the previous one
    retires after DKIM_RETIRING_DAYS)."""
    import json

    from chalicelib.db import session_scope
    from chalicelib.services.security import installation_keys

    with session_scope() as db:
        if action == "rotate":
            installation_keys.rotate(db)
        elif action == "activate":
            installation_keys.activate(db)
        listed = installation_keys.listed(db)
    return {"keys": json.loads(json.dumps(listed, default=str))}


def main(argv: list[str] | None = None) -> int:
    import json

    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: python -m chalicelib.deploy_tasks migrate | content-backfill | "
             "signing-key show|rotate|activate")
    if args not in (["migrate"], ["content-backfill"]) and not (len(args) == 2 and args[0] == "signing-key"
                                    and args[1] in SIGNING_KEY_ACTIONS):
        print(usage, file=sys.stderr)
        return 2
    from chalicelib import aws_bootstrap, errors

    aws_bootstrap.load_once(force=True)
    if args[0] == "migrate":
        print(migrate())
        return 0
    if args[0] == "content-backfill":
        print(json.dumps(content_backfill()))
        return 0
    try:
        print(json.dumps(signing_key(args[1]), indent=2))
    except errors.ServiceError as exc:
        print(exc.message, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
