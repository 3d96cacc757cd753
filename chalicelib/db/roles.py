"""The two PostgreSQL roles: the owner of the tables, which runs the migrations
(DATABASE_OWNER_URL), and the service's role (DATABASE_URL), which must be bound by the
row-level security policies: not the owner (an owner can turn them off), not a superuser,
no BYPASSRLS.

``ensure_app_role`` (the migrate step, ``make run``, the test suite) connects as the owner and
creates the service's role named by DATABASE_URL, with DATABASE_URL's password (set again on
every run, so a rotated secret takes effect at the next deploy), and grants it what the
service does: read and write rows of every table (never DDL, never the migration
bookkeeping), use the sequences. It refuses a role that could bypass the policies.
"""
from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import make_url


class RoleError(RuntimeError):
    """DATABASE_URL names a role that would not be bound by row-level security."""


_BYPASS = ("SELECT r.rolsuper, r.rolbypassrls, EXISTS (SELECT 1 FROM pg_tables t WHERE "
           "t.schemaname = current_schema() AND t.tableowner = r.rolname) AS owner "
           "FROM pg_roles r WHERE r.rolname = :name")


def same_role(owner_url: str, app_url: str) -> bool:
    return make_url(owner_url).username == make_url(app_url).username


def check_urls(owner_url: str, app_url: str) -> None:
    """DATABASE_OWNER_URL and DATABASE_URL must name one PostgreSQL database (RoleError
    otherwise, before anything is migrated)."""
    owner, app = make_url(owner_url), make_url(app_url)
    if owner.get_backend_name() != "postgresql" or app.get_backend_name() != "postgresql":
        raise RoleError("DATABASE_OWNER_URL is for PostgreSQL, with DATABASE_URL on the same "
                        "database; leave it empty for SQLite")
    if owner.database != app.database:
        raise RoleError(f"DATABASE_OWNER_URL names database {owner.database!r} and "
                        f"DATABASE_URL {app.database!r}: they must be the same database")


def ensure_app_role(owner_url: str, app_url: str) -> str:
    """Create or update the service's role and grant it its privileges; returns its name.
    Raises RoleError when the role could bypass the policies, or DATABASE_OWNER_URL and
    DATABASE_URL name different databases."""
    from chalicelib.db.engine import get_engine

    check_urls(owner_url, app_url)
    name, password = make_url(app_url).username, make_url(app_url).password
    if not name or same_role(owner_url, app_url):
        raise RoleError("DATABASE_URL must name a role other than DATABASE_OWNER_URL's")
    with get_engine(owner_url).begin() as conn:
        role, literal = conn.execute(text("SELECT quote_ident(:n), quote_literal(:p)"),
                                     {"n": name, "p": password}).one()
        found = conn.execute(text(_BYPASS), {"name": name}).first()
        if found is None:
            # Server-side quoting (quote_ident/quote_literal): utility statements take no
            # bind parameters.
            conn.execute(text(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB "
                              f"NOCREATEROLE" + (f" PASSWORD {literal}" if password else "")))
        else:
            if found.rolsuper or found.rolbypassrls or found.owner:
                raise RoleError(_why(name, found))
            if password:
                conn.execute(text(f"ALTER ROLE {role} PASSWORD {literal}"))
        database = conn.scalar(text("SELECT quote_ident(current_database())"))
        for grant in (
                f"GRANT CONNECT ON DATABASE {database} TO {role}",
                f"GRANT USAGE ON SCHEMA public TO {role}",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
                f"REVOKE INSERT, UPDATE, DELETE ON TABLE alembic_version FROM {role}",
                f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
                # Tables a later migration creates, until the next run grants them again.
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, "
                f"DELETE ON TABLES TO {role}",
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES "
                f"TO {role}"):
            conn.execute(text(grant))
    return name


def _why(name: str, found) -> str:
    reason = "is a superuser" if found.rolsuper else "has BYPASSRLS" if found.rolbypassrls \
        else "owns the tables"
    return (f"the role {name!r} of DATABASE_URL {reason}: row-level security would not bind "
            "it. Give the service a role of its own (docs/deploying.md)")


def warnings(app_url: str) -> list[str]:
    """Why the service's connection is not bound by the policies, if it is not (PostgreSQL;
    nothing elsewhere): the start banner and the migrate step's answer show these."""
    from chalicelib.db.engine import get_engine

    if make_url(app_url).get_backend_name() != "postgresql":
        return []
    with get_engine(app_url).connect() as conn:
        found = conn.execute(text(_BYPASS.replace(":name", "current_user"))).first()
        conn.rollback()
    if found is None or not (found.rolsuper or found.rolbypassrls or found.owner):
        return []
    return [_why(make_url(app_url).username or "?", found)
            .replace("Give the service", "Set DATABASE_OWNER_URL and give the service")]
