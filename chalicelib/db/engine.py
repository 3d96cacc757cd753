"""Engines and sessions, shaped for Lambda.

One engine per database URL lives at module level, so a warm Lambda container reuses its
connection across invocations; a connection idle in the pool for more than
PING_AFTER_IDLE_SECONDS is pinged at checkout and replaced if RDS Proxy or an idle timeout
closed it, and sessions always return their connection to the pool on exit, so
none leak. SQLite (the embedded default) runs with WAL and ``BEGIN IMMEDIATE`` so that the
local stack's threads queue for the write lock instead of failing with "database is locked".
"""
from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from chalicelib.config import get_settings
from chalicelib.db import tenancy

if TYPE_CHECKING:
    import ssl

_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_factories: dict[str, sessionmaker] = {}
_autocommit_engines: dict[str, Engine] = {}
_not_postgresql: set[str] = set()  # URLs autocommit_engine answered None for


def _create_engine(url: str, autocommit: bool = False) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
        # At most 15 connections, as SQLAlchemy's default (5 + 10 overflow), but all kept
        # open: with the default, a burst of writes from a worker's threads closed an
        # overflow connection at nearly every return and opened a new one (its PRAGMAs and
        # the schema read again): ~1 connection a 2 messages in bench_delivery_cpu.py,
        # whose CPU a message this cut by a quarter.
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               pool_size=15, max_overflow=0)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # noqa: ANN001
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # noqa: ANN001
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    if parsed.get_driver_name() == "pg8000":
        _cache_pg8000_paramstyle()
        _pipeline_pg8000_statements()
    # An autocommit engine sets the mode once per new connection (pg8000: a flag, no round
    # trip) and, unlike execution_options(isolation_level=...) on a pooled connection, has
    # nothing to reset when the connection returns to the pool.
    extra = {"isolation_level": "AUTOCOMMIT"} if autocommit else {}
    # DATABASE_SSL=off is a plain connection: pg8000's own default (None) would instead
    # build a CA-loading TLS context (~20 ms of CPU) and ask the server for TLS on every
    # new connection, and use it whenever the server offers it.
    context = database_ssl_context(get_settings())
    extra["connect_args"] = {"ssl_context": context if context is not None else False}
    # Connections are opened on demand, so a Lambda container (one request at a time) still
    # holds one or two; the gateway and the local stack run ~20 threads that query, and a
    # pool smaller than that closes its overflow connections on every return and reopens
    # them (pg8000's connect is a few ms: 6% of the gateway's time on inbound mail).
    engine = create_engine(url, pool_size=20, max_overflow=10, pool_recycle=300, **extra)

    # pg8000 leaves Nagle on: the tail of a large statement (a 10 KB message's INSERT) then
    # waits for the server's delayed ACK, ~40 ms, while the server waits for that tail.
    @event.listens_for(engine, "connect")
    def _no_delay(dbapi_connection, _record):  # noqa: ANN001
        sock = getattr(dbapi_connection, "_usock", None)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        register = getattr(dbapi_connection, "register_in_adapter", None)
        if register is not None:
            register(_PG_TIMESTAMP_OID, _timestamp_in)
        if _named_statements:
            dbapi_connection.named_statements = {}

    # Pre-ping, but only a connection that sat idle in the pool for a while: one checked in
    # moments ago was working then (a closed one fails its first statement, which invalidates
    # the pool as usual). Saves a round trip on every busy request and worker loop.
    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection, record):  # noqa: ANN001
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection, record, _proxy):  # noqa: ANN001
        if time.monotonic() - record.info.get("idle_since", 0.0) <= PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # noqa: BLE001  (the pool retries with a fresh connection)
            raise DisconnectionError(f"stale pooled connection: {exc}") from exc

    return engine


def database_ssl_context(settings) -> ssl.SSLContext | None:
    """The TLS context pg8000 connects with (DATABASE_SSL), or None for a plain connection.
    ``verify`` checks the certificate chain and the host name; ``require`` only encrypts
    (for a server whose certificate cannot be checked, e.g. a self-signed one)."""
    import ssl

    if settings.database_ssl == "off":
        return None
    context = ssl.create_default_context(cafile=settings.database_ssl_ca or None)
    if settings.database_ssl == "require":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


PING_AFTER_IDLE_SECONDS = 2.0
_PG_TIMESTAMP_OID = 1114


def _timestamp_in(data: str):
    """pg8000 reads TIMESTAMP values with strptime, a tenth of a request's CPU when a row
    carries a few; PostgreSQL's ISO output is what fromisoformat reads, ~20x faster. Anything
    else (infinity, BC, years past 9999) goes to pg8000's own parser."""
    try:
        return datetime.fromisoformat(data)
    except ValueError:
        from pg8000.converters import timestamp_in

        return timestamp_in(data)
_MAX_CACHED_SQL = 8192
_LONG_SQL_CACHED = 16  # longer texts kept (a 500-row INSERT is ~100 KB with its $n form)
_MAX_LONG_SQL = 1 << 20


# The two pg8000 speed-ups below replace driver internals; they were written against and are
# tested with this exact release (requirements.txt pins it). Another release runs unpatched.
PATCHED_PG8000_VERSION = "1.31.6"


def _pg8000_is_patchable() -> bool:
    import pg8000

    if pg8000.__version__ != PATCHED_PG8000_VERSION:
        logging.getLogger(__name__).warning(
            "pg8000 %s is not %s: running without the statement pipelining and placeholder "
            "cache (slower, still correct)", pg8000.__version__, PATCHED_PG8000_VERSION)
        return False
    return True


def _cache_pg8000_paramstyle() -> None:
    """pg8000 rewrites every statement's %s placeholders to $n with a char-by-char Python
    scanner (about 0.5 ms for our longer statements, several times per request). For the
    "format" style the result depends on the SQL text alone and SQLAlchemy sends the same
    texts again and again, so remember it. Long texts (a batch's multi-row INSERT, whose text
    repeats for every batch of the same size: the scan was ~4% of ``make run``'s CPU per
    message) go in a separate, small cache, so a few of them cannot crowd out the short ones
    nor hold much memory."""
    import pg8000.legacy as legacy

    if not _pg8000_is_patchable():
        return
    original = legacy.convert_paramstyle
    if getattr(original, "cached", False):
        return

    def scan(query: str) -> str:
        return original("format", query, ())[0]

    rewrite = functools.lru_cache(maxsize=1024)(scan)
    rewrite_long = functools.lru_cache(maxsize=_LONG_SQL_CACHED)(scan)

    def convert_paramstyle(style, query, args):
        if style == "format" and len(query) <= _MAX_LONG_SQL:
            return (rewrite if len(query) <= _MAX_CACHED_SQL else rewrite_long)(query), args
        return original(style, query, args)

    convert_paramstyle.cached = True  # type: ignore[attr-defined]
    convert_paramstyle.long_texts = rewrite_long  # type: ignore[attr-defined]
    legacy.convert_paramstyle = convert_paramstyle


def _pipeline_pg8000_statements() -> None:
    """pg8000 runs every parameterized statement (COMMIT included) as three network round
    trips: Parse+Sync, Describe+Sync, then Bind+Execute+Sync. Nothing in the later messages
    depends on the earlier answers (parameter types come from the Python values, the row
    description is read as it arrives), so send Parse, Describe, Bind, Execute, Sync at once
    and read the answers in one go, as libpq's PQexecParams does: one round trip. An error
    at any step makes the server skip to the Sync and answer ErrorResponse, ReadyForQuery,
    which handle_messages raises as before. COPY (a stream) keeps the original path. The
    messages go without the Flush pg8000 puts after each (it asks the server to send what it
    has at once, a packet per answer): the Sync at the end sends the answers together.

    The tenant a statement acts for (db/tenancy.py sets ``tenancy_prelude`` on the
    connection just before it) goes in the same write: Parse, Bind, Execute of
    ``tenancy.PRELUDE_SQL`` in front of the statement, before the one Sync, so it shares the
    statement's transaction even in autocommit mode and costs no round trip. Its answer (no
    row) is read first; if it fails, the server skipped the statement and the error is
    raised."""
    from pg8000 import converters, core

    if not _pg8000_is_patchable():
        return
    original = core.CoreConnection.execute_unnamed
    if getattr(original, "pipelined", False):
        return
    original_simple = core.CoreConnection.execute_simple
    prelude_sql = tenancy.PRELUDE_SQL

    def send_prelude(self, statement: str):
        prelude = getattr(self, "tenancy_prelude", None)
        if prelude is None or statement in _TRANSACTION_CONTROL:
            return None
        if not self.autocommit:  # once per transaction; autocommit: every statement of a batch
            self.tenancy_prelude = None
        write_parse(self, prelude_sql, ())
        write_bind(self, prelude, text=True)
        core._write(self._sock, core.EXECUTE_MSG)
        return core.Context(prelude_sql)

    def write_parse(self, statement: str, oids, name: bytes = b"") -> None:
        # send_PARSE without its Flush; ``name``: a named statement's, else the unnamed one
        val = bytearray(name + core.NULL_BYTE)
        val.extend(statement.encode(self._client_encoding) + core.NULL_BYTE)
        val.extend(core.H_pack(len(oids)))
        for oid in oids:
            val.extend(core.i_pack(0 if oid == -1 else oid))
        self._send_message(core.PARSE, val)

    def write_bind(self, vals, text: bool = False, name: bytes = b"") -> None:
        # send_BIND of the unnamed portal without its Flush; ``text``: the values are str;
        # ``name``: the named statement's (else the unnamed statement)
        params = vals if text else _make_params(self.py_types, vals, converters.make_param)
        val = bytearray(core.NULL_BYTE + name + core.NULL_BYTE + core.H_pack(0) +
                        core.H_pack(len(params)))
        for value in params:
            if value is None:
                val.extend(core.i_pack(-1))
            else:
                encoded = value.encode(self._client_encoding)
                val.extend(core.i_pack(len(encoded)))
                val.extend(encoded)
        val.extend(core.H_pack(0))
        self._send_message(core.BIND, val)

    def read_prelude(self, context) -> None:
        while True:
            code, data_len = core.ci_unpack(core._read(self._sock, 5))
            self.message_types[code](core._read(self._sock, data_len - 4), context)
            if code == core.COMMAND_COMPLETE:
                return
            if code == core.READY_FOR_QUERY:  # it failed: the statement was skipped
                raise context.error or core.InterfaceError("the tenancy prelude failed")

    def execute_unnamed(self, statement, vals=(), oids=(), stream=None):
        if stream is not None:
            return original(self, statement, vals, oids, stream)
        prelude = send_prelude(self, statement)
        named, name, fresh = getattr(self, "named_statements", None), b"", False
        if named is not None and not oids and statement not in _TRANSACTION_CONTROL:
            name, columns, input_funcs = named.get(statement, _UNNAMED)
            if not name and len(named) < NAMED_STATEMENTS_PER_CONNECTION:
                # A name never used before on this connection: one whose Parse worked but
                # whose statement failed later exists on the server though not in ``named``.
                self.named_counter = getattr(self, "named_counter", 0) + 1
                name, fresh = f"es_{self.named_counter}".encode("ascii"), True
        if name and not fresh:  # planned and described already: Bind and Execute only
            context = core.Context(statement, columns=columns, input_funcs=input_funcs)
            write_bind(self, vals, name=name)
        else:
            context = core.Context(statement)
            write_parse(self, statement, oids, name)
            self._send_message(core.DESCRIBE, core.STATEMENT + name + core.NULL_BYTE)
            write_bind(self, vals, name=name)
        try:
            core._write(self._sock, core.EXECUTE_MSG)
            core._write(self._sock, core.SYNC_MSG)
            core._flush(self._sock)
        except AttributeError as exc:
            if self._sock is None:
                raise core.InterfaceError("connection is closed") from exc
            raise
        if prelude is not None:
            read_prelude(self, prelude)
        self.handle_messages(context)
        if fresh:  # its rows' description is kept: the same statement answers the same columns
            named[statement] = (name, context.columns, context.input_funcs)
        return context

    def execute_simple(self, statement):
        # A statement without parameters normally goes as a simple Query (which carries its
        # own Sync); with a tenant to send it takes the pipelined path instead.
        if getattr(self, "tenancy_prelude", None) is not None and \
                statement not in _TRANSACTION_CONTROL:
            return execute_unnamed(self, statement)
        return original_simple(self, statement)

    execute_unnamed.pipelined = True  # type: ignore[attr-defined]
    execute_unnamed.tenancy_prelude = True  # type: ignore[attr-defined]
    core.CoreConnection.execute_unnamed = execute_unnamed
    core.CoreConnection.execute_simple = execute_simple


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _datetime(value: datetime) -> str:
    if value.tzinfo is not None:  # as pg8000: in UTC
        value = value.astimezone(timezone.utc)
    return value.isoformat()


# How each element of a flat list is written in PostgreSQL's array input syntax (manual,
# 8.15.6): strings always quoted with backslashes and double quotes escaped, None the
# unquoted NULL, bytes as a quoted hex bytea, the rest as pg8000 writes them alone.
_ELEMENTS: dict[type, Callable[[Any], str]] = {
    str: _quoted,
    type(None): lambda _: "NULL",
    int: str,
    bool: lambda v: "true" if v else "false",
    bytes: lambda v: '"\\\\x' + v.hex() + '"',
    datetime: _datetime,
}


def _flat_array(values: list) -> str | None:
    """PostgreSQL's text form of a flat list whose elements are all of the types in
    ``_ELEMENTS`` (exactly: no subclasses), or None for any other list (pg8000 encodes it).
    pg8000 sends each element through singledispatch and escapes every character of every
    string in a Python loop (``array_string_escape``): ~10% of the SMTP committer's CPU for
    a batch's arrays. The text reads back as the same values."""
    try:
        return "{" + ",".join([_ELEMENTS[type(v)](v) for v in values]) + "}"
    except KeyError:
        return None


def _make_params(py_types, vals, make_param) -> list:
    params = []
    for value in vals:
        if type(value) is list:
            encoded = _flat_array(value)
            if encoded is not None:
                params.append(encoded)
                continue
        params.append(make_param(py_types, value))
    return params


# Named (server-side prepared) statements: see use_named_statements.
NAMED_STATEMENTS_PER_CONNECTION = 64
_UNNAMED = (b"", None, None)
_named_statements = False


def use_named_statements() -> None:
    """From now on, new PostgreSQL connections of this process keep each statement they run
    (up to NAMED_STATEMENTS_PER_CONNECTION per connection) as a named prepared statement,
    with the description of its rows: the next run of the same SQL is Bind and Execute
    only, without PostgreSQL parsing and planning it again (most of the database's time for
    the SMTP committer's small statements) nor pg8000 reading its columns. For a process
    that keeps its connections and runs a few statements over and over: the gateway's
    committer process. Not for Lambda: RDS Proxy pins a client's connection once it
    prepares statements, and a Lambda's pool is short-lived."""
    global _named_statements
    _named_statements = True


# What pg8000 itself sends around statements: never with a tenant in front.
_TRANSACTION_CONTROL = frozenset({"begin transaction", "commit", "rollback"})


def get_engine(url: str | None = None) -> Engine:
    url = url or get_settings().database_url
    engine = _engines.get(url)
    if engine is None:
        with _lock:
            engine = _engines.get(url)
            if engine is None:
                engine = _create_engine(url)
                factory = sessionmaker(engine, expire_on_commit=False)
                if engine.dialect.name == "postgresql":
                    tenancy.install(engine, factory)
                _engines[url], _factories[url] = engine, factory
    return engine


def autocommit_engine(url: str | None = None) -> Engine | None:
    """PostgreSQL only (None elsewhere): an engine on the same database whose connections
    run in autocommit mode, for hot paths made of single statements (each is then its own
    transaction: no BEGIN, no COMMIT round trip). Anything needing two statements to commit
    together must use a session."""
    url = url or get_settings().database_url
    engine = _autocommit_engines.get(url)
    if engine is None:
        if url in _not_postgresql:
            return None
        if make_url(url).get_backend_name() != "postgresql":
            # remembered: parsing the URL on each call was ~0.5% of a SQLite worker's CPU
            _not_postgresql.add(url)
            return None
        with _lock:
            engine = _autocommit_engines.get(url)
            if engine is None:
                engine = _create_engine(url, autocommit=True)
                tenancy.install(engine, None, autocommit=True)
                _autocommit_engines[url] = engine
    return engine


def dialect_name(session: Session) -> str:
    return session.get_bind().dialect.name


def upsert(session: Session, model):
    """``INSERT INTO model`` of the session's dialect, which has ``on_conflict_do_update``
    (PostgreSQL and SQLite). Only that dialect's module is imported, and not at cold start."""
    if dialect_name(session) == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(model)


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the session's transaction has committed (queue wake-ups: a worker
    must never wake before the row it is told about is visible)."""
    session.info.setdefault("after_commit", []).append(callback)


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A unit of work: commit on success, roll back on error, always close."""
    get_engine(url)
    factory = _factories[url or get_settings().database_url]
    session = factory()
    try:
        yield session
        session.commit()
        callbacks = session.info.pop("after_commit", [])
    except BaseException:
        session.rollback()
        session.info.pop("after_commit", None)
        raise
    finally:
        session.close()
    for callback in callbacks:
        callback()