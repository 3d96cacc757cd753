"""Writing submissions and their messages with their statistics counters (``store``): on
PostgreSQL in ONE statement (``write``), elsewhere with core multi-row INSERTs.

Three statements (submissions, then messages that need their ids, then counters) are three
round trips, and in the SMTP gateway's committer each one also waits for the GIL behind the
event loop. Here they are data-modifying CTEs of a single statement whose SQL does not depend
on how many rows it writes (the values travel as arrays, read back with ``unnest``), so
SQLAlchemy compiles it once per column set:

* ``new_ids``: one ``nextval`` per submission, numbered by ordinality (a volatile CTE is
  evaluated once, so submissions and messages see the same ids);
* ``new_submissions``: INSERT ... SELECT from the submission arrays joined to ``new_ids``;
* ``new_messages``: INSERT ... SELECT from the message arrays, each row naming its
  submission's ordinal; RETURNING id and token (RETURNING's order is not promised, the token
  is unique);
* ``counted``: the counter upsert (``counters.upsert_statement``).

Foreign keys are checked at the end of the statement, when every CTE has written.
"""
from __future__ import annotations

import functools
import json

from sqlalchemy import JSON, Integer, String, bindparam, cast, func, insert, literal_column, \
    select
from sqlalchemy.orm import Session

from chalicelib.db import counters
from chalicelib.db.models import Message, Submission
from chalicelib.services import content

#: Above this many message rows the arrays cost more to encode than the round trips saved.
MAX_ROWS = 100

_SUBMISSION_COLUMNS = ("message_id_header", "size", "content_key", "content_sha256")


# Built once: SQLAlchemy then reuses their memoised cache key and compiled form. RETURNING
# in any order (``sort_by_parameter_order`` makes SQLite insert row by row: ~3x the CPU of
# the batch), with what tells the rows apart: a message's unique token, a submission's
# columns (two submissions alike in all of them are alike in every column written, so either
# id serves either entry).
_INSERT_SUBMISSIONS = insert(Submission.__table__).returning(
    Submission.__table__.c.id, *[Submission.__table__.c[n] for n in _SUBMISSION_COLUMNS])
_INSERT_MESSAGES = insert(Message.__table__).returning(
    Message.__table__.c.id, Message.__table__.c.token)


def store(db: Session, server_id: int, now, sub_rows: list[dict], rows: list[dict],
          owner: list[int]) -> tuple[list[int], list[int]]:
    """Submissions and their messages (outgoing or incoming) with their statistics counters:
    one statement on PostgreSQL (``write``), else core multi-row INSERTs. Returns (submission
    ids, message ids) in input order; every row of ``rows`` must have the same keys. A
    submission row brings its bytes as ``raw``: they are stored in the content store first,
    and the row names them (services/content/: written before the row naming them commits)."""
    refs = content.put_many([row.pop("raw") for row in sub_rows])
    for row, ref in zip(sub_rows, refs):
        row.update(content.submission_columns(ref))
    if len(rows) <= MAX_ROWS and db.get_bind().dialect.name == "postgresql":
        return write(db, server_id, now, sub_rows, rows, owner)
    # Core inserts on the tables: the ORM's bulk-insert layer costs more Python per
    # statement than the statement's round trip on a busy host.
    alike: dict[tuple, list[int]] = {}
    for found in db.execute(_INSERT_SUBMISSIONS, sub_rows):
        alike.setdefault(tuple(found[1:]), []).append(found[0])
    sub_ids = [alike[tuple(row[n] for n in _SUBMISSION_COLUMNS)].pop() for row in sub_rows]
    for row, index in zip(rows, owner):
        row["submission_id"] = sub_ids[index]
    by_token = {token: message_id for message_id, token in db.execute(_INSERT_MESSAGES, rows)}
    ids = [by_token[row["token"]] for row in rows]
    counters.count_inserted_messages(db, rows)  # no flush saw these rows
    return sub_ids, ids


def write(db: Session, server_id: int, now, sub_rows: list[dict], rows: list[dict],
          owner: list[int]) -> tuple[list[int], list[int]]:
    """Insert ``sub_rows`` (submission column dicts) and ``rows`` (message column dicts, row
    i belonging to submission ``owner[i]``) with their counters; returns (submission ids,
    message ids), each in input order."""
    columns = tuple(name for name in rows[0] if name not in ("server_id", "created_at",
                                                            "updated_at"))
    items = counters.inserted_message_items(rows)
    params = {"server_id": server_id, "now": now, "n_subs": len(sub_rows),
              "m_owner": [index + 1 for index in owner]}
    for name in _SUBMISSION_COLUMNS:
        params[f"s_{name}"] = [row[name] for row in sub_rows]
    for name in columns:
        values = [row[name] for row in rows]
        params[f"m_{name}"] = [json.dumps(v) for v in values] if name == "metadata" else values
    params.update(counters.upsert_params(items))
    found = {token: (message_id, submission_id) for message_id, token, submission_id
             in db.execute(_statement(columns, len(items)), params)}
    message_ids = [found[row["token"]][0] for row in rows]
    sub_ids = [0] * len(sub_rows)
    for row, index in zip(rows, owner):
        sub_ids[index] = found[row["token"]][1]
    return sub_ids, message_ids


@functools.lru_cache(maxsize=32)
def _statement(columns: tuple, items: int):
    # The dialect module is imported by the first send, not at cold start (importing it is
    # ~25 ms of app.py's import; tests/api/test_cold_start.py).
    from sqlalchemy.dialects.postgresql import ARRAY

    subs, msgs = Submission.__table__, Message.__table__

    def array(prefix: str, table, name: str):
        element = String() if name == "metadata" else table.c[name].type
        return bindparam(f"{prefix}_{name}", type_=ARRAY(element))

    new_ids = select(func.nextval(literal_column("pg_get_serial_sequence('submissions', 'id')"))
                     .label("id"),
                     func.generate_series(1, bindparam("n_subs", type_=Integer)).label("ordinal")
                     ).cte("new_ids")
    sub_values = func.unnest(*[array("s", subs, n) for n in _SUBMISSION_COLUMNS]) \
        .table_valued(*_SUBMISSION_COLUMNS, with_ordinality="ordinal").render_derived()
    new_submissions = insert(subs).from_select(
        ["id", "server_id", *_SUBMISSION_COLUMNS, "created_at"],
        select(new_ids.c.id, bindparam("server_id", type_=subs.c.server_id.type),
               *[sub_values.c[n] for n in _SUBMISSION_COLUMNS],
               bindparam("now", type_=subs.c.created_at.type))
        .join_from(sub_values, new_ids, new_ids.c.ordinal == sub_values.c.ordinal)
    ).returning(subs.c.id).cte("new_submissions")
    message_values = func.unnest(bindparam("m_owner", type_=ARRAY(Integer)),
                                 *[array("m", msgs, n) for n in columns]) \
        .table_valued("owner", *columns).render_derived()
    picked = [cast(message_values.c[n], JSON) if n == "metadata" else message_values.c[n]
              for n in columns]
    now = bindparam("now", type_=msgs.c.created_at.type)
    new_messages = insert(msgs).from_select(
        ["server_id", "submission_id", *columns, "created_at", "updated_at"],
        select(bindparam("server_id", type_=msgs.c.server_id.type), new_ids.c.id, *picked,
               now, now)
        .join_from(message_values, new_ids, new_ids.c.ordinal == message_values.c.owner)
    ).returning(msgs.c.id, msgs.c.token, msgs.c.submission_id).cte("new_messages")
    statement = select(new_messages).add_cte(new_submissions)
    if items:
        statement = statement.add_cte(
            counters.upsert_statement(items, returning=True).cte("counted"))
    return statement
