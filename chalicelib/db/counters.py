"""Rolled-up statistics (``StatCounter``), kept in step with the rows in the same transaction.

An ``after_flush`` listener on every Session looks at what the flush wrote: a new Message
counts +1 in its metrics, a Message whose status/held/bounce/scope/stream/tag changed moves
-1/+1 between them, and new MessageEvents, OpenEvents and ClickEvents count once. So no caller
has to remember to count (HTTP, SMTP, the delivery worker, bounces), and a rolled-back
transaction rolls its counts back too. Counters are never decremented when rows are deleted
(retention): statistics keep the history. ``rebuild`` recomputes them from the rows (after a
bulk load with plain SQL, or to repair).

Counts are applied as one upsert per flush, keys sorted so that concurrent transactions lock
counter rows in the same order (no deadlocks between them).

Buckets are UTC: "day" for message/open/click metrics (per dimension: "" all, "s:<stream id>",
"t:<tag>"), "hour" for delivery outcome events and for opens and clicks of the whole server
(dim "" only: GET /stats/engagement?interval=hour), and for the reputation guard's bounces and
complaints (``reputation:bounce``, ``reputation:complaint``: services/reputation/guard.py
counts them itself, once per message, and ``rebuild`` recounts them from its marks).
"""
from __future__ import annotations

import functools

from collections import Counter
from datetime import datetime

from sqlalchemy import DateTime, Integer, bindparam, delete, event, func, inspect, \
    literal_column, select, text
from sqlalchemy.orm import Session

from chalicelib import statuses
from chalicelib.db.models.messages import Message, MessageEvent
from chalicelib.db.models.reputation import ReputationMark
from chalicelib.db.models.tracking import ClickEvent, OpenEvent, StatCounter

OUTCOME_EVENTS = ("MessageSent", "MessageDelayed", "MessageDeliveryFailed", "MessageHeld")
_MESSAGE_ATTRS = ("scope", "status", "bounce", "held", "stream_id", "tag", "created_at")
_KEY_COLUMNS = ["server_id", "period", "bucket", "metric", "dim"]


def truncate(value: datetime, unit: str) -> datetime:
    value = value.replace(minute=0, second=0, microsecond=0)
    return value.replace(hour=0) if unit == "day" else value


def bucket_expr(dialect: str, column, unit: str):
    """The SQL truncating ``column`` to the UTC hour or day."""
    if dialect == "postgresql":
        return func.date_trunc(literal_column(f"'{unit}'"), column)
    fmt = "%Y-%m-%d %H:00:00" if unit == "hour" else "%Y-%m-%d 00:00:00"
    return func.strftime(fmt, column)


def as_datetime(value) -> datetime:
    if isinstance(value, str):  # SQLite's strftime
        return datetime.fromisoformat(value)
    return value.replace(tzinfo=None) if value.tzinfo else value


def message_metrics(scope: str, status: str, bounce: bool, held: bool) -> list[str]:
    if scope == "incoming":
        return ["incoming"] + (["bounces"] if bounce else [])
    return [f"status:{status}"] + (["held"] if held or status == statuses.HELD else [])


def dims(stream_id: int | None, tag: str | None) -> list[str]:
    return ["", f"s:{stream_id or 0}"] + ([f"t:{tag}"] if tag is not None else [])


def event_metrics(kind: str, likely_machine: bool, first: bool) -> list[str]:
    return [kind] + ([f"machine_{kind}"] if likely_machine else []) + \
        ([f"unique_{kind}"] if first else [])


def _message_keys(server_id: int, values) -> list[tuple]:
    scope, status, bounce, held, stream_id, tag, created = values
    day = truncate(created, "day")
    return [(server_id, "day", day, m, d)
            for m in message_metrics(scope or "outgoing", status or statuses.PENDING, bool(bounce),
                                     bool(held))
            for d in dims(stream_id, tag)]


def _previous_values(obj: Message) -> tuple | None:
    """The message's values before this flush, or None when none of them changed."""
    state = inspect(obj)
    changed, values = False, []
    for name in _MESSAGE_ATTRS:
        history = state.attrs[name].history
        if history.deleted:
            changed = True
            values.append(history.deleted[0])
        elif history.added:
            changed = True
            values.append(None)  # was unset/None before (active history loads real values)
        else:
            values.append(getattr(obj, name))
    return tuple(values) if changed else None


def _current_values(obj: Message) -> tuple:
    return tuple(getattr(obj, name) for name in _MESSAGE_ATTRS)


def apply(connection, deltas: Counter) -> None:
    items = sorted((key, n) for key, n in deltas.items() if n)
    dialect = connection.dialect.name
    if not items or dialect not in ("postgresql", "sqlite"):
        return
    for start in range(0, len(items), 500):
        chunk = items[start:start + 500]
        connection.execute(upsert_statement(len(chunk)), upsert_params(chunk))


def upsert_params(items: list[tuple]) -> dict:
    """The bind values of ``upsert_statement(len(items))`` for ``items`` ((key, n), sorted)."""
    params = {}
    for i, (key, n) in enumerate(items):
        params.update({f"s{i}": key[0], f"p{i}": key[1], f"b{i}": key[2], f"m{i}": key[3],
                       f"d{i}": key[4], f"n{i}": n})
    return params


@functools.lru_cache(maxsize=64)
def upsert_statement(size: int, returning: bool = False, only_if: str | None = None):
    """One INSERT ... ON CONFLICT adding ``size`` counter rows (values: ``upsert_params``),
    built once per size. Written as text (the same on PostgreSQL and SQLite): SQLAlchemy
    cannot cache the compiled form of its on_conflict_do_update construct, and compiling it
    took ~1 ms per call. ``returning``: a selectable (``RETURNING 1 AS one``) that can be
    chained as a CTE. ``only_if`` (PostgreSQL, in a chain of CTEs): the name of an earlier
    CTE; nothing is added unless it returned a row."""
    rows = ", ".join(f"(:s{i}, :p{i}, :b{i}, :m{i}, :d{i}, :n{i})" for i in range(size))
    if only_if is not None:  # typed: a SELECT's VALUES gets no types from the target columns
        rows = ", ".join(f"(CAST(:s{i} AS BIGINT), CAST(:p{i} AS TEXT), :b{i}, "
                         f"CAST(:m{i} AS TEXT), CAST(:d{i} AS TEXT), CAST(:n{i} AS BIGINT))"
                         for i in range(size))
        rows = f"SELECT v.* FROM (VALUES {rows}) AS v WHERE EXISTS (SELECT 1 FROM {only_if})"
    else:
        rows = "VALUES " + rows
    stmt = text(
        "INSERT INTO stat_counters (server_id, period, bucket, metric, dim, count) "
        + rows + " ON CONFLICT (server_id, period, bucket, metric, dim) DO UPDATE "
        "SET count = stat_counters.count + excluded.count"
        + (" RETURNING 1 AS one" if returning else ""))
    stmt = stmt.bindparams(*[bindparam(f"b{i}", type_=DateTime()) for i in range(size)])
    return stmt.columns(one=Integer) if returning else stmt


def message_change(server_id: int, before: tuple, after: tuple, deltas: Counter) -> None:
    """Move a message written with a core UPDATE (which no flush sees) between its metrics:
    ``before``/``after`` are its values of _MESSAGE_ATTRS."""
    for key in _message_keys(server_id, before):
        deltas[key] -= 1
    for key in _message_keys(server_id, after):
        deltas[key] += 1


def event_inserted(server_id: int, event_name: str, created_at: datetime,
                   deltas: Counter) -> None:
    """Count a MessageEvent written with a core INSERT."""
    if event_name in OUTCOME_EVENTS:
        deltas[(server_id, "hour", truncate(created_at, "hour"), f"event:{event_name}", "")] += 1


def inserted_message_items(rows) -> list[tuple]:
    """The counter items ((key, n), sorted) of Message rows written with a bulk INSERT
    (column-name dicts), which no flush sees: +1 in each row's metrics."""
    deltas: Counter = Counter()
    keys_of: dict[tuple, list] = {}  # a batch's rows mostly share their counted values
    for row in rows:
        values = (row["server_id"], *(row.get(name) for name in _MESSAGE_ATTRS))
        keys = keys_of.get(values)
        if keys is None:
            keys = keys_of[values] = list(_message_keys(values[0], values[1:]))
        for key in keys:
            deltas[key] += 1
    return sorted((key, n) for key, n in deltas.items() if n)


def count_inserted_messages(session: Session, rows) -> None:
    """Count bulk-inserted Message rows in the session's transaction (one upsert)."""
    items = inserted_message_items(rows)
    if items:
        apply(session.connection(), Counter(dict(items)))


def _count_flush(session: Session, _context) -> None:
    deltas: Counter = Counter()
    for obj in session.new:
        if isinstance(obj, Message):
            for key in _message_keys(obj.server_id, _current_values(obj)):
                deltas[key] += 1
        elif isinstance(obj, MessageEvent) and obj.event in OUTCOME_EVENTS:
            deltas[(obj.server_id, "hour", truncate(obj.created_at, "hour"),
                    f"event:{obj.event}", "")] += 1
        elif isinstance(obj, (OpenEvent, ClickEvent)):
            kind = "opens" if isinstance(obj, OpenEvent) else "clicks"
            day, hour = truncate(obj.created_at, "day"), truncate(obj.created_at, "hour")
            for metric in event_metrics(kind, obj.likely_machine, obj.first):
                for dim in dims(obj.stream_id, obj.tag):
                    deltas[(obj.server_id, "day", day, metric, dim)] += 1
                deltas[(obj.server_id, "hour", hour, metric, "")] += 1
    for obj in session.dirty:
        if isinstance(obj, Message):
            before = _previous_values(obj)
            if before is None or before[-1] is None:
                continue
            for key in _message_keys(obj.server_id, before):
                deltas[key] -= 1
            for key in _message_keys(obj.server_id, _current_values(obj)):
                deltas[key] += 1
    if deltas:
        apply(session.connection(), deltas)


def _load_old_value(target, value, oldvalue, initiator):
    return value


# active_history: setting one of these on a message whose row was expired (after a commit)
# loads the old value first, so the listener knows what to subtract.
for _name in _MESSAGE_ATTRS[:-1]:
    event.listen(getattr(Message, _name), "set", _load_old_value, active_history=True,
                 retval=True)
event.listen(Session, "after_flush", _count_flush)


def rebuild(db: Session, server_id: int | None = None) -> int:
    """Recompute the counters of one server (or all) from the rows; returns the rows written."""
    dialect = db.get_bind().dialect.name
    deltas: Counter = Counter()

    def where(model):
        return [model.server_id == server_id] if server_id is not None else []

    day = bucket_expr(dialect, Message.created_at, "day")
    for sid, bucket, scope, status, bounce, held, stream_id, tag, n in db.execute(
            select(Message.server_id, day, Message.scope, Message.status, Message.bounce,
                   Message.held, Message.stream_id, Message.tag, func.count())
            .where(*where(Message))
            .group_by(Message.server_id, day, Message.scope, Message.status, Message.bounce,
                      Message.held, Message.stream_id, Message.tag)):
        for key in _message_keys(sid, (scope, status, bounce, held, stream_id, tag,
                                       as_datetime(bucket))):
            deltas[key] += n
    for model, kind in ((OpenEvent, "opens"), (ClickEvent, "clicks")):
        day = bucket_expr(dialect, model.created_at, "day")
        for sid, bucket, stream_id, tag, machine, first, n in db.execute(
                select(model.server_id, day, model.stream_id, model.tag, model.likely_machine,
                       model.first, func.count())
                .where(*where(model))
                .group_by(model.server_id, day, model.stream_id, model.tag,
                          model.likely_machine, model.first)):
            for metric in event_metrics(kind, machine, first):
                for dim in dims(stream_id, tag):
                    deltas[(sid, "day", as_datetime(bucket), metric, dim)] += n
        hour = bucket_expr(dialect, model.created_at, "hour")
        for sid, bucket, machine, first, n in db.execute(
                select(model.server_id, hour, model.likely_machine, model.first, func.count())
                .where(*where(model))
                .group_by(model.server_id, hour, model.likely_machine, model.first)):
            for metric in event_metrics(kind, machine, first):
                deltas[(sid, "hour", as_datetime(bucket), metric, "")] += n
    hour = bucket_expr(dialect, MessageEvent.created_at, "hour")
    for sid, bucket, name, n in db.execute(
            select(MessageEvent.server_id, hour, MessageEvent.event, func.count())
            .where(*where(MessageEvent), MessageEvent.event.in_(OUTCOME_EVENTS))
            .group_by(MessageEvent.server_id, hour, MessageEvent.event)):
        deltas[(sid, "hour", as_datetime(bucket), f"event:{name}", "")] += n
    # The reputation guard's counts (services/reputation/guard.py), from its marks.
    hour = bucket_expr(dialect, ReputationMark.created_at, "hour")
    for sid, bucket, kind, n in db.execute(
            select(ReputationMark.server_id, hour, ReputationMark.kind, func.count())
            .where(*where(ReputationMark))
            .group_by(ReputationMark.server_id, hour, ReputationMark.kind)):
        deltas[(sid, "hour", as_datetime(bucket), f"reputation:{kind}", "")] += n
    db.execute(delete(StatCounter).where(*where(StatCounter)))
    apply(db.connection(), deltas)
    return sum(1 for n in deltas.values() if n)
