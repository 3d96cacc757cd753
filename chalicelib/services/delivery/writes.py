"""The delivery worker's writes, as core SQL built once per shape with bind parameters: the
in-flight marker, the outcome, and how a group of them is run (ONE statement on PostgreSQL,
chained with data-modifying CTEs; a few statements in one transaction on SQLite).

Both writes are guarded on the claim (``messages.locked_by`` = this worker's claim token):

* the marker is ``INSERT ... SELECT FROM messages WHERE locked_by = us``: a worker whose claim
  was taken writes nothing and does not send (``recorder.ClaimLost``);
* the outcome's message UPDATE has ``WHERE locked_by = us`` and every other write of the
  outcome (attempt, prepared bytes, event, counters, webhook rows) reads from that UPDATE's
  RETURNING (PostgreSQL: the CTE ``om``; SQLite: the statements after it are not run), so a
  worker that outlived its claim during DATA records nothing over the next worker's outcome.
  ``run`` tags a guarded group's result with ``CLAIM`` when its message row was still ours.

The statements run prebuilt (``Prebuilt``: compiled once per shape and process, sent with
their values in order), skipping SQLAlchemy's per-execution cache lookup and parameter
rebuild: on PostgreSQL the one composed statement, on SQLite each of the group's (they run
once or twice per message). On PostgreSQL the composed statement, when nothing uncommitted
rides with it, goes straight to the driver's cursor on a pooled autocommit connection
(``tenancy.cursor``: the claimed rows' tenant sent with it), not through a SQLAlchemy
Connection, its execution context and events (~65 us of CPU a statement, more than pg8000's
own work). On SQLite they go straight to the DBAPI cursor, in a transaction
of their own on a pooled connection (``sqlite_transaction``: BEGIN IMMEDIATE, the
statements, COMMIT), not through SQLAlchemy's execution and the ORM session's transaction,
whose bookkeeping cost more CPU than SQLite's own work; the session's connection and
transaction when it holds work that commits with them.
"""
from __future__ import annotations

from collections import namedtuple
from contextlib import contextmanager
from datetime import datetime
from typing import Callable, Iterator

from sqlalchemy import (BigInteger, DateTime, bindparam, cast, insert, literal, select, union_all,
                        update)
from sqlalchemy.sql.selectable import CTE

from chalicelib import statuses
from chalicelib.db import counters, tenancy
from chalicelib.db.engine import autocommit_engine
from chalicelib.db.models import (CapturedMessage, Delivery, Message, MessageEvent, MessageRaw,
                                  WebhookRequest)
from chalicelib.services.webhooks import payload

M, D, E, R = (Message.__table__, Delivery.__table__, MessageEvent.__table__,
              MessageRaw.__table__)
C = CapturedMessage.__table__
CLAIM = "claim"  # tag: the guarded outcome's message row was still ours, and is written
GUARD = "om"
# The sent copy's row: the key, size and sha256 of bytes stored before (services/content/)
CONTENT_COLUMNS = ("content_key", "size", "content_sha256")  # the outcome's message UPDATE, as the CTE its other writes read from

_statements: dict = {}


def cached(key, build):
    """Our statements are built once per shape with bind parameters and reused: SQLAlchemy
    then skips their construction, cache key and compilation (~1-3 ms per delivery)."""
    stmt = _statements.get(key)
    if stmt is None:
        stmt = _statements[key] = build()
    return stmt


def bind(name: str, column):
    return bindparam(name, type_=column.type)


def in_flight_statements(with_raw: bool, admitted=None) -> list:
    """The InFlight marker (and the prepared bytes), written only while the claim is still
    ours: INSERT ... SELECT FROM the message row WHERE locked_by = us. A worker that outlived
    its claim (CLAIM_TIMEOUT_SECONDS) writes nothing and does not send, so two workers never
    both reach DATA for one message. ``admitted``: the condition of the message's pacing
    admission (pacing.admission_statements), which must hold too."""
    held = (M.c.id == bind("i_mid", M.c.id), M.c.locked_by == bind("i_worker", M.c.locked_by))
    if admitted is not None:
        held = (*held, admitted)
    statements = []
    if with_raw:  # the bytes are in the content store already: the row names them
        statements.append(insert(R).from_select(
            ["message_id", *CONTENT_COLUMNS],
            select(M.c.id, *[bind(f"i_{c}", R.c[c]) for c in CONTENT_COLUMNS]).where(*held))
            .returning(R.c.message_id))
    statements.append(insert(D).from_select(
        ["message_id", "status", "stage", "host", "tls", "tls_verified", "created_at"],
        select(M.c.id, literal(statuses.IN_FLIGHT), literal("data"), bind("i_host", D.c.host),
               literal(False), literal(False), bind("i_now", D.c.created_at)).where(*held))
        .returning(D.c.id))
    return statements


def finish_statements(dialect: str, values: tuple, attempt: tuple | None, attempt_id: bool,
                      raw: bool, counter_items: list, event: bool,
                      captured: bool = False) -> list:
    """The outcome's statements for one shape, every value a bind parameter (m_*, a_*, r_raw,
    e_*, c_*, the counters' own names, wh_event): see ``recorder.outcome`` for the values. The
    first is the message UPDATE, guarded on our claim; on PostgreSQL it is already the CTE
    ``GUARD`` and the others take the message id from it (no row there: they write nothing)."""
    mid, now, worker = bind("m_id", M.c.id), bind("m_now", M.c.updated_at), \
        bind("m_worker", M.c.locked_by)
    message = (update(M).where(M.c.id == mid, M.c.locked_by == worker)
               # updated_at explicitly: a CTE's DML gets no Python-side onupdate
               .values(**{k: bind(f"m_{k}", M.c[k]) for k in values}, updated_at=now,
                       locked_by=None, locked_at=None)
               .returning(M.c.id))
    guard = message.cte(GUARD) if dialect == "postgresql" else None
    ours = select(guard.c.id).scalar_subquery() if guard is not None else mid

    def add(table, columns: dict):
        """INSERT of one row for the message: on PostgreSQL only if the guard wrote it."""
        if guard is None:
            return insert(table).values(message_id=mid, **columns)
        return insert(table).from_select(["message_id", *columns],
                                         select(guard.c.id, *columns.values()))

    statements = [guard if guard is not None else message]
    if attempt is not None:
        columns = {k: bind(f"a_{k}", D.c[k]) for k in attempt}
        statements.append(
            update(D).where(D.c.id == bind("a_id", D.c.id), D.c.message_id == ours)
            .values(**columns).returning(D.c.id) if attempt_id else
            add(D, columns).returning(D.c.id))
    if raw:
        statements.append(add(R, {c: bind(f"r_{c}", R.c[c]) for c in CONTENT_COLUMNS})
                          .returning(R.c.message_id))
    if captured:  # an entry of the server's captured-mail inbox (messages/captured.py)
        statements.append(add(C, {"server_id": bind("c_server", C.c.server_id),
                                  "reason": bind("c_reason", C.c.reason),
                                  "created_at": now}).returning(C.c.id))
    if event:
        statements.append(add(E, {
            "server_id": bind("e_server", E.c.server_id), "event": bind("e_event", E.c.event),
            "uuid": bind("e_uuid", E.c.uuid), "details": bind("e_details", E.c.details),
            "created_at": now}).returning(E.c.id))
    if counter_items:
        statements.append(counters.upsert_statement(
            len(counter_items), returning=True, only_if=GUARD if guard is not None else None))
    if event:
        table = WebhookRequest.__table__
        statements.append(payload.fan_out_statement(
            dialect, server_id=bind("e_server", table.c.server_id), message_id=ours,
            event=bind("e_event", table.c.event), uuid=bind("e_uuid", table.c.uuid),
            body=bind("e_body", table.c.body), now=now, only_if=guard))
    return statements


def run(db, key: tuple, parts: list, params: dict) -> dict[str, list[int]]:
    """Write groups of statements together as one transaction and commit. ``parts``: (build,
    tag, guarded) per group, ``build()`` giving its statements (cached per ``key``, their
    shape). Returns, per tag, the ids the group's last statement returned, and ``CLAIM`` when
    a guarded group's message row was still ours. When an outcome written alone lost its
    claim and the session held uncommitted work for it (a suppression, a stale attempt's
    update), that work is rolled back instead of committed: the outcome is recorded whole or
    not at all. (Written with a marker, only the outcome's own statements are skipped.)"""
    dialect = db.get_bind().dialect.name
    composed = cached((dialect, *key), lambda: _compose(dialect, [
        (build(), tag, guarded) for build, tag, guarded in parts]))
    alone = len(parts) == 1 and parts[0][2]  # an outcome, not riding on a marker
    pending = db.in_transaction()
    tagged: dict[str, list[int]] = {}
    if dialect == "postgresql":
        keep = (lambda rows: any(tag == CLAIM for tag, _ in rows)) if alone else None
        for tag, row_id in _single(db, composed, params, keep=keep):
            tagged.setdefault(tag, []).append(row_id)
        return tagged
    with sqlite_transaction(db) as execute:
        for statements, tag, guard in composed:
            for i, stmt in enumerate(statements):
                rows = execute(stmt, params)
                if guard and i == 0:
                    if not rows:
                        break  # the claim is not ours: nothing more of this outcome
                    tagged[CLAIM] = [row[0] for row in rows]
                if tag is not None and i == len(statements) - 1:
                    tagged[tag] = [row[0] for row in rows]
    if pending:  # the session's transaction: committed (or rolled back) with its work
        if alone and CLAIM not in tagged:
            db.rollback()
        else:
            db.commit()
    return tagged


@contextmanager
def sqlite_transaction(db) -> Iterator[Callable[..., list]]:
    """SQLite: a transaction for statements run prebuilt straight on the DBAPI cursor (no
    SQLAlchemy execution, result or ORM transaction bookkeeping per statement: most of the
    CPU the delivery writes cost there); yields ``execute(stmt, params, named=False) ->
    rows`` (tuples; ``named``: with the columns as attributes too). When the session holds
    uncommitted work, the statements run on its connection, in its transaction, and the
    caller commits or rolls back the session. Otherwise a pooled
    connection runs them as a transaction of their own: ``BEGIN IMMEDIATE`` (the write lock
    first, as the engine's sessions take it), ``COMMIT`` when the block ends, ``ROLLBACK``
    when it raises; the session is left without a transaction, as after its commit."""
    engine = db.get_bind()
    dialect = engine.dialect
    raw = None
    if db.in_transaction():
        dbapi = db.connection().connection.dbapi_connection
    else:
        raw = engine.raw_connection()
        dbapi = raw.dbapi_connection
    cursor = dbapi.cursor()

    def execute(stmt, params: dict, named: bool = False) -> list:
        prebuilt = _prebuilt_for(stmt, dialect)
        cursor.execute(prebuilt.sql, prebuilt.parameters(params))
        rows = cursor.fetchall()  # [] when it returns no rows
        if named and rows:  # rows whose columns are attributes too, as SQLAlchemy's
            if prebuilt.row is None:
                prebuilt.row = namedtuple("Row", [c[0] for c in cursor.description],
                                          rename=True)
            rows = [prebuilt.row(*row) for row in rows]
        return rows

    try:
        if raw is not None:
            cursor.execute("BEGIN IMMEDIATE")
        yield execute
        if raw is not None:
            cursor.execute("COMMIT")
    except BaseException:
        if raw is not None and dbapi.in_transaction:
            dbapi.rollback()
        raise
    finally:
        cursor.close()
        if raw is not None:
            raw.close()  # back to the pool


def _compose(dialect: str, groups: list):
    if dialect != "postgresql":
        return groups
    ctes, selects = [], []

    def tagged(tag: str, cte):
        selects.append(select(literal(tag).label("tag"),
                              cast(list(cte.c)[0], BigInteger).label("id")))

    for statements, tag, guarded in groups:
        for i, stmt in enumerate(statements):
            cte = stmt if isinstance(stmt, CTE) else stmt.cte(f"w{len(ctes)}")
            ctes.append(cte)
            if guarded and i == 0:
                tagged(CLAIM, cte)
            if tag is not None and i == len(statements) - 1:
                tagged(tag, cte)
    return (union_all(*selects) if len(selects) > 1 else selects[0]).add_cte(*ctes)


def _single(db, stmt, params: dict, keep=None):
    """Run ONE statement as its own transaction and return its rows. Unless the session
    holds uncommitted work that must commit with it (a suppression, a stale attempt's
    update), that is autocommit mode on PostgreSQL: no BEGIN and no COMMIT round trip, and a
    single statement is atomic all the same. ``keep(rows)`` false: roll that work back."""
    autocommit = None if db.in_transaction() else autocommit_engine()
    if autocommit is None:
        rows = execute_prebuilt(db.connection(), stmt, params)
        if keep is None or keep(rows):
            db.commit()
        else:
            db.rollback()
        return rows
    tenant = tenancy.current(db)  # the claimed rows' servers
    if tenancy.carries_settings(autocommit):  # straight on the driver's cursor
        prebuilt = _prebuilt_for(stmt, autocommit.dialect)
        with tenancy.cursor(autocommit, tenant) as cursor:
            cursor.execute(prebuilt.sql, prebuilt.parameters(params))
            return cursor.fetchall() if cursor.description is not None else []
    with tenancy.connect(autocommit, tenant) as conn:
        return execute_prebuilt(conn, stmt, params)


class Prebuilt:
    """One of our PostgreSQL statements compiled once, with how to lay out its positional
    parameters. Run through SQLAlchemy as usual, every execution hashed the statement's deep
    cache key for the compiled-cache lookup and rebuilt the parameters of every bind in it
    (~5% of the CPU per message, the marker's); this sends the compiled text with the values
    in order, each through its type's bind processor as SQLAlchemy would. Its rows come back
    as the driver gives them: for statements whose RETURNING needs no result processing
    (ours give tags and integer ids)."""

    def __init__(self, stmt, dialect):
        compiled = stmt.compile(dialect=dialect)
        if compiled.positiontup is None or compiled.literal_execute_params or \
                compiled.post_compile_params:
            raise ValueError("not a plain positional statement")
        self.sql = compiled.string
        self.row = None  # the named tuple of its rows (``sqlite_transaction``), once seen
        # per position: (parameter name, required, its value when not given, type processor)
        self.layout = []
        for name in compiled.positiontup:
            bind = compiled.binds[name]
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None and isinstance(bind.type, DateTime):
                processor = _isoformat_when_same(processor)
            self.layout.append((bind.key, bind.required,
                                None if bind.required else bind.effective_value, processor))

    def parameters(self, params: dict) -> tuple:
        values = []
        for key, required, default, processor in self.layout:
            # KeyError: a required value is missing (SQLAlchemy raises too)
            value = params[key] if required else params.get(key, default)
            values.append(value if processor is None else processor(value))
        return tuple(values)


_SAMPLES = (datetime(2026, 1, 2, 3, 4, 5, 6), datetime(1999, 12, 31, 23, 59, 59),
            datetime(5, 6, 7, 8, 9, 10, 999999))


def _isoformat_when_same(processor):
    """A timestamp's bind processor that writes a naive datetime with ``isoformat`` when
    that is what ``processor`` writes (SQLite's stored form: ``YYYY-MM-DD HH:MM:SS.ffffff``),
    ~5x cheaper than its format over a dict of the fields; anything else goes to
    ``processor``. Where ``processor`` writes another form (PostgreSQL passes the datetime
    itself), it stays."""
    if any(processor(v) != v.isoformat(" ", "microseconds") for v in _SAMPLES):
        return processor

    def process(value):
        if type(value) is datetime and value.tzinfo is None:
            return value.isoformat(" ", "microseconds")
        return processor(value)
    return process


_prebuilt: dict[int, tuple] = {}


def _prebuilt_for(stmt, dialect) -> Prebuilt:
    entry = _prebuilt.get(id(stmt))
    if entry is None or entry[0] is not stmt:
        entry = _prebuilt[id(stmt)] = (stmt, Prebuilt(stmt, dialect))
    return entry[1]


def execute_prebuilt(conn, stmt, params: dict) -> list:
    """``stmt`` (a cached statement, so it lives as long as the process) run on ``conn``
    prebuilt (``Prebuilt``) on either database, and its rows fetched ([] when it returns
    none). ``params`` may hold other statements' keys too (only its own are sent). For
    statements whose rows need no result processing: tags, ids, counts."""
    prebuilt = _prebuilt_for(stmt, conn.dialect)
    result = conn.exec_driver_sql(prebuilt.sql, prebuilt.parameters(params))
    # .all(): an open RETURNING cursor would keep SQLite busy
    return result.all() if result.returns_rows else []

