"""Which tenant a transaction acts for: PostgreSQL row-level security keyed on it.

On PostgreSQL every table holding a tenant's data has row-level security enabled and forced
(migration 0011, ``db/migrations/rls.py``), and its policies read four transaction-local
settings that this module sets:

* ``app.server_ids``: the servers the transaction acts for (a request with a server's API
  key or a console user's ``X-Server``; a worker's claimed rows);
* ``app.organization_id``: an organization's management (a member on its admin routes): the
  organization, its servers, its members and invitations (its servers' rows through
  ``app.server_ids``, which then lists every one of them: ``enter_organization``);
* ``app.user_id``: the signed-in person (their account, sessions, memberships, the
  organizations they belong to);
* ``app.scope``: ``instance_admin`` (an admin API key or an instance admin) or
  ``cross_tenant`` (service work that must cross tenants) see every row; anything else
  leaves the other three to decide.

A transaction that set nothing acts for nobody and reads no tenant's rows. Who it acts for is
set in one place per way in: ``api/auth.py`` (a request's credential), ``services/
organizations/lookup.py`` (a member entering an organization), the workers after they claim
a row, the SMTP gateway after AUTH. Work that must cross tenants says so with
``across_tenants(db, reason)`` where ``reason`` is one of ``CROSS_TENANT`` below, each used
in one module (a test checks it), so a forgotten filter never silently reads everyone.

Cost: the settings ride on the next statement (``db/engine.py`` pipelines a
``SELECT set_config(...)`` in front of it: no extra round trip); a statement on an
autocommit connection carries them each time. SQLite has no row-level security: there the
application's filters are the only guard. docs/tenancy.md has the whole picture.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

# The settings the policies read, in the order of Tenant.settings().
SETTINGS = ("app.scope", "app.server_ids", "app.organization_id", "app.user_id")
# One statement that sets them all for the current transaction and returns no row (so its
# answer cannot mix with the statement it is pipelined in front of). ``||`` evaluates every
# set_config; the result is never NULL, so WHERE is false.
PRELUDE_SQL = "SELECT WHERE (%s) IS NULL" % " || ".join(
    f"set_config('{name}', ${n}, true)" for n, name in enumerate(SETTINGS, 1))
# The same sent as a statement of its own (drivers without the pipeline), transaction-local,
# and session-level for autocommit connections (whose every statement is its own transaction).
_SEPARATE_SQL = {local: "SELECT WHERE (%s) IS NULL" % " || ".join(
    f"set_config('{name}', %s, {'true' if local else 'false'})" for name in SETTINGS)
    for local in (True, False)}

NOBODY_SCOPE = "nobody"
INSTANCE_ADMIN = "instance_admin"
CROSS_TENANT_SCOPE = "cross_tenant"

# Work that must cross tenants, each in one module (tests/db/test_tenancy.py checks that every
# reason is used, and in that module only). docs/tenancy.md lists them.
CROSS_TENANT: dict[str, tuple[str, str]] = {
    "credential-lookup": ("chalicelib/services/organizations/credentials.py",
                          "an API or SMTP key, or an SMTP-IP address, names the server"),
    "session-lookup": ("chalicelib/services/accounts/sessions.py",
                       "a Bearer token names the person"),
    "account-lookup": ("chalicelib/services/accounts/users.py",
                       "an address or a reset token names the account (login, password "
                       "reset); an address must be unique among all accounts (registration, "
                       "address change); a new installation has no account at all"),
    "invitation": ("chalicelib/services/accounts/members.py",
                   "an invitation token names its organization; adding a member finds an "
                   "account outside the organization"),
    "passkey-login": ("chalicelib/services/accounts/passkeys.py",
                      "a passkey's answer names its credential, and so the account, before "
                      "anyone is signed in"),
    "sso-login": ("chalicelib/services/accounts/sso.py",
                  "the identity provider's subject or address names the account"),
    "create-organization": ("chalicelib/services/organizations/organizations.py",
                            "a new organization belongs to no tenant until it exists, and "
                            "its permalink must be unique among all"),
    "inbound-mail": ("chalicelib/services/inbound/classify.py",
                     "mail at the MX: the recipient address names the route, the return "
                     "path or unsubscribe address names the message it answers"),
    "tracking": ("chalicelib/services/tracking/engagement.py",
                 "an open pixel or click link names its message by token"),
    "unsubscribe": ("chalicelib/services/suppressions/unsubscribe.py",
                    "a one-click unsubscribe link names its message by token"),
    "mail-frame": ("chalicelib/services/mailframes/frames.py",
                   "a mail frame's public URL names its row by a signed id (an iframe sends "
                   "no credential)"),
    "delivery-claim": ("chalicelib/services/delivery/claim.py",
                       "a delivery wake-up names a message row by id"),
    "outbound-relay": ("chalicelib/services/delivery/outbound_relay.py",
                       "a worker handing a message to its IP pool's relay names it by its "
                       "return path's token"),
    "webhook-claim": ("chalicelib/services/webhooks/deliver.py",
                      "a webhook wake-up names a request row by id"),
    "webhook-batch-claim": ("chalicelib/services/webhooks/batch.py",
                            "a batch of webhook wake-ups names its request rows by id (the "
                            "embedded database's claim of the whole batch)"),
    "inbound-claim": ("chalicelib/services/inbound/forward.py",
                      "an inbound wake-up names a received message by id"),
    "bulk-claim": ("chalicelib/services/messages/bulk.py",
                   "a bulk wake-up names a bulk job by id"),
    "sweeper": ("chalicelib/workers/sweeper.py",
                "due rows of every tenant, and the queue lag (GET /metrics, the lag metric)"),
    "retention": ("chalicelib/workers/retention.py", "expired rows of every tenant"),
    "content-store": ("chalicelib/services/content/rows.py",
                      "an object is deleted only when no row of any tenant names its key (the "
                      "same bytes are stored once); the backfill moves every tenant's rows"),
    "reputation-guard": ("chalicelib/services/reputation/guard.py",
                         "the guard's pause is written in the installation's audit trail "
                         "(no tenant's); the sweeper re-evaluates every server it watches"),
    "domain-checks": ("chalicelib/services/domains/checks.py",
                      "the scheduled DNS check of every tenant's domains"),
    "migrations": ("chalicelib/db/migrations/env.py", "schema and data migrations"),
    "seed-admin-key": ("chalicelib/services/accounts/admin_keys.py",
                       "the migrate step and `make run` seed ADMIN_API_KEY and record the keys "
                       "it revokes in the audit trail"),
    "local-start": ("chalicelib/local/stack.py",
                    "`make run` clears the wake-up marks of the queue that died with it"),
}

# Tables without row-level security, and why they are not a tenant's data (a test fails on a
# table of the metadata that is in neither this list nor protected by policies).
NOT_TENANT_DATA: dict[str, str] = {
    "installation_keys": "the installation's own signing keys (webhook signatures); no "
                         "tenant owns them and every worker signs with them",
    "ip_pools": "the installation's sending IPs, managed by instance admins and shared by "
                "servers (a server only names its pool)",
    "ip_addresses": "the addresses of those pools",
    "admin_api_keys": "the operator's machine keys for the whole instance (stored as hashes)",
    "oidc_logins": "single sign-on state before anyone is known (the state's hash, a nonce)",
    "smtp_auth_failures": "failed SMTP AUTH counts per client IP address, before any "
                          "credential is known",
    "passkey_ceremonies": "WebAuthn state between a passkey's options and the browser's "
                          "answer (a challenge, the token's hash): a sign-in ceremony is made "
                          "before anyone is known, as oidc_logins; the row's user only checks "
                          "the answer",
    "mta_sts_policies": "the cached MTA-STS policies of recipient domains: public data about "
                        "other people's domains, shared by every worker",
    "delivery_destinations": "per-destination pacing state (a receiving mail system as seen "
                             "from an IP pool), shared by every server's mail that goes there",
    "delivery_leases": "the connection slots workers hold on those destinations",
}


@dataclass(frozen=True)
class Tenant:
    """Who a transaction acts for (see the module doc for what each field opens)."""

    scope: str = NOBODY_SCOPE
    server_ids: tuple[int, ...] = ()
    organization_id: int | None = None
    user_id: int | None = None

    def settings(self) -> tuple[str, str, str, str]:
        return (self.scope, ",".join(str(int(i)) for i in self.server_ids),
                "" if self.organization_id is None else str(int(self.organization_id)),
                "" if self.user_id is None else str(int(self.user_id)))


NOBODY = Tenant()


def for_server(server_id: int, user_id: int | None = None) -> Tenant:
    """A request with a server's API key, or a console user on one server (``user_id``)."""
    return Tenant("server", (int(server_id),), user_id=user_id)


def for_servers(server_ids) -> Tenant:
    """A worker acting for the rows it claimed (a batch may span servers)."""
    ids = tuple(sorted({int(i) for i in server_ids}))
    return Tenant("server", ids) if ids else NOBODY


def for_organization(organization_id: int, user_id: int | None = None,
                     server_ids=()) -> Tenant:
    """A member managing an organization: all of it, its servers (``server_ids``: every
    one, which ``enter_organization`` lists) and their rows."""
    return Tenant("organization", tuple(sorted({int(i) for i in server_ids})),
                  organization_id=int(organization_id), user_id=user_id)


def enter_organization(db: Session, organization_id: int, user_id: int | None = None) -> Tenant:
    """``db`` acts for a member managing the organization: it, and its servers' rows through
    ``app.server_ids``, which lists them (read now, as the organization sees them). A
    server's own rows have one arm, ``tenant_server``, not a second one for the organization
    managing it (migration 0015: that arm was most of what the policies cost a send)."""
    act(db, for_organization(organization_id, user_id))
    server_ids: tuple = ()
    if db.get_bind().dialect.name == "postgresql":
        server_ids = tuple(db.scalars(text("SELECT id FROM servers WHERE organization_id = :o"),
                                      {"o": int(organization_id)}))
    tenant = for_organization(organization_id, user_id, server_ids)
    act(db, tenant)
    return tenant


def add_server(db: Session, server_id: int) -> None:
    """A server made in this transaction: an organization's management acts for it too (its
    first rows, a default stream, are written next)."""
    tenant = current(db)
    if tenant.scope == "organization" and int(server_id) not in tenant.server_ids:
        act(db, for_organization(tenant.organization_id, tenant.user_id,
                                 (*tenant.server_ids, server_id)))


def for_user(user_id: int) -> Tenant:
    """A signed-in person before choosing an organization: their own account's rows."""
    return Tenant("user", user_id=int(user_id))


def instance_admin(user_id: int | None = None) -> Tenant:
    """An admin API key or an instance admin: every tenant (the ``instance_admin`` policy)."""
    return Tenant(INSTANCE_ADMIN, user_id=user_id)


def cross_tenant(reason: str) -> Tenant:
    """Work that must see every tenant's rows; ``reason`` must be one of CROSS_TENANT."""
    if reason not in CROSS_TENANT:
        raise ValueError(f"{reason!r} is not a cross-tenant reason of db/tenancy.CROSS_TENANT")
    return Tenant(CROSS_TENANT_SCOPE)


_SAVEPOINT_STATEMENTS = ("SAVEPOINT ", "RELEASE SAVEPOINT ", "ROLLBACK TO SAVEPOINT ")
_TENANT = "tenancy.tenant"  # Session.info / connection info: the Tenant acted for
_SENT = "tenancy.sent"  # connection info: its settings are in force in this transaction


def current(target: Session | Connection) -> Tenant:
    return target.info.get(_TENANT, NOBODY)


def act(target: Session | Connection, tenant: Tenant, *, flush: bool = True) -> Tenant:
    """From the next statement on, ``target`` (a session: every transaction it runs; a
    connection: until it goes back to the pool) acts for ``tenant``. Returns the tenant it
    acted for before. A session's pending changes are flushed first: what was changed is
    written for whom it was changed."""
    previous = current(target)
    if isinstance(target, Session):
        open_here = target.get_bind().dialect.name == "postgresql" and target.in_transaction()
        if flush and open_here and tenant != previous and \
                (target.new or target.dirty or target.deleted):
            target.flush()
        target.info[_TENANT] = tenant
        if open_here:
            _attach(target.connection(), tenant)
    else:
        _attach(target, tenant)  # (a connection's info is its pooled connection's)
    return previous


@contextmanager
def acting(target: Session | Connection, tenant: Tenant) -> Iterator[None]:
    """Act for ``tenant`` inside the block; the tenant acted for before is restored
    afterwards (changes made inside are flushed first; after an error nothing is flushed:
    the error goes on, and the transaction with it)."""
    previous = act(target, tenant)
    try:
        yield
    except BaseException:
        act(target, previous, flush=False)
        raise
    act(target, previous)


def across_tenants(target: Session | Connection, reason: str):
    """Work that must see every tenant's rows, for ``reason`` (a key of CROSS_TENANT), inside
    the block (see ``acting``)."""
    return acting(target, cross_tenant(reason))


@contextmanager
def connect(engine: Engine, tenant: Tenant) -> Iterator[Connection]:
    """A connection of ``engine`` (an autocommit one, typically) acting for ``tenant``."""
    with engine.connect() as conn:
        act(conn, tenant)
        yield conn


def carries_settings(engine: Engine) -> bool:
    """``engine`` is an autocommit engine whose statements carry their tenant's settings in
    the same write (pg8000 with db/engine.py's pipeline): ``cursor`` can run on it."""
    return engine in _PIPELINED_AUTOCOMMIT


@contextmanager
def cursor(engine: Engine, tenant: Tenant) -> Iterator:
    """A DBAPI cursor on a pooled connection of ``engine`` (``carries_settings``), every
    statement of which acts for ``tenant`` (each is its own transaction and carries the
    settings), for a hot path's prebuilt statements: no SQLAlchemy Connection, execution
    context or events per statement (on the delivery's in-flight marker those cost more CPU
    than pg8000's own work). A driver error comes out as SQLAlchemy's ``DBAPIError``, as
    through a Connection; a connection the error shows broken is invalidated."""
    raw = engine.raw_connection()
    dbapi = raw.dbapi_connection
    found = None
    if not dbapi.autocommit:  # (a transaction would stay open on the pooled connection)
        raw.close()
        raise ValueError("tenancy.cursor needs an autocommit engine's connection")
    try:
        # the settings of every statement until the connection goes back to the pool
        # (``_checked_in`` clears them); autocommit mode sends them with each one
        dbapi.tenancy_prelude = tenant.settings()
        found = dbapi.cursor()
        yield found
    except engine.dialect.loaded_dbapi.Error as error:
        broken = engine.dialect.is_disconnect(error, dbapi, found)
        if broken:
            raw.invalidate(error)
        raise DBAPIError.instance(None, None, error, engine.dialect.loaded_dbapi.Error,
                                  connection_invalidated=broken,
                                  dialect=engine.dialect) from error
    finally:
        if found is not None:
            found.close()
        raw.close()  # back to the pool (or gone, when invalidated)


_PIPELINED_AUTOCOMMIT: "weakref.WeakSet[Engine]" = weakref.WeakSet()


def _attach(conn: Connection, tenant: Tenant) -> None:
    info = conn.info
    if info.get(_TENANT, NOBODY) != tenant:
        info[_TENANT] = tenant
        info[_SENT] = False


# ------------------------------------------------------------------------------ the engine


def install(engine: Engine, session_factory, autocommit: bool = False) -> None:
    """Send each connection's tenant with its statements (PostgreSQL engines only). With
    pg8000 and db/engine.py's pipeline, the settings go in front of the next statement in the
    same write; otherwise they are a statement of their own (one more round trip).
    ``autocommit``: the engine's connections are in autocommit mode (``cursor``)."""
    from pg8000 import core

    pipelined = engine.dialect.driver == "pg8000" and \
        getattr(core.CoreConnection.execute_unnamed, "tenancy_prelude", False)
    if pipelined and autocommit:
        _PIPELINED_AUTOCOMMIT.add(engine)

    def before_execute(conn, cursor, statement, parameters, context, executemany) -> None:
        info = conn.info
        raw = conn.connection.dbapi_connection
        if pipelined:
            raw.tenancy_prelude = None
        if statement.startswith(_SAVEPOINT_STATEMENTS):
            return  # (after a failed statement only ROLLBACK TO may run; the next one sends)
        # Every transaction says whom it acts for, nobody included (app.scope is never empty
        # for this code: see the before_tenancy policy of migration 0011); an autocommit
        # statement is a transaction of its own.
        autocommit = getattr(raw, "autocommit", False)
        if info.get(_SENT) and not autocommit:
            return
        values = info.get(_TENANT, NOBODY).settings()
        if pipelined:
            raw.tenancy_prelude = values  # db/engine.py sends it in front of this statement
        else:
            # Another driver or pg8000 release: a statement of its own, transaction-local, or
            # session-level in autocommit mode (where every statement sets all of them).
            cursor.execute(_SEPARATE_SQL[not autocommit], values)
        info[_SENT] = True

    def clear_prelude(conn) -> None:
        if pipelined and conn is not None and not conn.closed:
            raw = conn.connection.dbapi_connection
            if raw is not None:
                raw.tenancy_prelude = None

    event.listen(engine, "begin", _transaction_boundary)
    event.listen(engine, "commit", _transaction_boundary)
    event.listen(engine, "rollback", _transaction_boundary)
    event.listen(engine, "rollback_savepoint", _savepoint_rolled_back)
    event.listen(engine, "before_cursor_execute", before_execute)
    # (A prelude db/engine.py did not send stays until the next statement replaces it, or
    # the connection goes back to the pool.)
    event.listen(engine, "handle_error", lambda context: clear_prelude(context.connection))
    event.listen(engine.pool, "checkin", _checked_in)
    if session_factory is not None:
        event.listen(session_factory, "after_begin", _session_began)


def _session_began(session: Session, _transaction, connection: Connection) -> None:
    _attach(connection, session.info.get(_TENANT, NOBODY))


def _transaction_boundary(conn: Connection) -> None:
    # Transaction-local settings end with the transaction: send them again in the next one.
    conn.info[_SENT] = False


def _savepoint_rolled_back(conn: Connection, _name, _context) -> None:
    conn.info[_SENT] = False  # settings made inside the savepoint are undone


def _checked_in(dbapi_connection, record) -> None:
    record.info.pop(_TENANT, None)
    record.info.pop(_SENT, None)
    if dbapi_connection is not None and hasattr(dbapi_connection, "tenancy_prelude"):
        dbapi_connection.tenancy_prelude = None
