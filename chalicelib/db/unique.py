"""Unique indexes as the last word on "already taken".

A service looks first (the usual case: an early answer naming the taken value), but two
requests can both look before either commits: the second one's INSERT or UPDATE then waits
for the first on the index and fails when it commits. ``guard`` runs such a write in a
savepoint and turns that failure into the service's own error, the one its look would have
raised, so the loser gets a 422 naming the field instead of a 500, and the session stays
usable. Every check-then-write on a unique index goes through it (users' addresses,
memberships, permalinks, domain, route and IP pool names)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from chalicelib import errors

UNIQUE_VIOLATION = "23505"  # PostgreSQL's SQLSTATE


def is_unique_violation(exc: IntegrityError) -> bool:
    orig = exc.orig
    detail = orig.args[0] if orig is not None and orig.args else None
    if isinstance(detail, dict):  # pg8000: the server's error fields
        return detail.get("C") == UNIQUE_VIOLATION
    if getattr(orig, "pgcode", None) is not None:  # psycopg
        return orig.pgcode == UNIQUE_VIOLATION
    return "UNIQUE constraint failed" in str(orig)  # sqlite3


@contextmanager
def guard(db: Session, taken: errors.ServiceError) -> Iterator[None]:
    """Flush the block's writes in a savepoint; ``taken`` is raised when a unique index
    refuses them. Other integrity errors (a foreign key, NOT NULL) are left as they are."""
    try:
        with db.begin_nested():
            yield
            db.flush()
    except IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        raise taken from None
