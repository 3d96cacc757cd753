"""The delivery writes' prebuilt statements (writes.Prebuilt): compiled once, they give the
same rows as SQLAlchemy's own execution, with literals, repeated parameters and typed values
(JSON, timestamps) laid out as SQLAlchemy would, and a missing value is an error. Both
databases run the delivery writes prebuilt; SQLite's are checked by what they store."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import (JSON, BigInteger, Column, DateTime, Integer, MetaData, Table, bindparam,
                        cast, insert, literal, select)

from chalicelib.db.engine import get_engine
from chalicelib.services.delivery import writes
from tests.conftest import TEST_DATABASE_URL


def _statement():
    n = bindparam("n", type_=BigInteger)
    return select(literal("tag").label("tag"), cast(n + n, BigInteger).label("id"),
                  cast(bindparam("doc", type_=JSON), JSON).label("doc"),
                  bindparam("at", type_=DateTime(timezone=True)).label("at"),
                  literal(None, type_=JSON).label("nothing"))


@pytest.mark.postgres_only
@pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                    reason="rows as PostgreSQL's driver gives them")
def test_a_prebuilt_statement_gives_what_sqlalchemy_gives(database):
    stmt = _statement()
    params = {"n": 21, "doc": {"a": [1, "x"]},
              "at": datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)}
    with get_engine(database).connect() as conn:
        expected = [tuple(row) for row in conn.execute(stmt, params)]
        prebuilt = writes.Prebuilt(stmt, conn.dialect)
        got = [tuple(row) for row in conn.exec_driver_sql(prebuilt.sql,
                                                          prebuilt.parameters(params))]
    assert expected == [("tag", 42, {"a": [1, "x"]}, params["at"], None)]
    assert got == expected

def test_a_missing_value_is_an_error(database):
    with get_engine(database).connect() as conn:
        prebuilt = writes.Prebuilt(_statement(), conn.dialect)
    with pytest.raises(KeyError):
        prebuilt.parameters({"n": 1, "at": None})


def test_a_prebuilt_insert_stores_what_sqlalchemy_stores(database):
    """Either database: the same values inserted prebuilt and by SQLAlchemy read back equal
    (JSON serialized, timestamps converted, a literal and a defaulted value laid out)."""
    table = Table("prebuilt_probe", MetaData(), Column("id", Integer, primary_key=True),
                  Column("doc", JSON), Column("at", DateTime(timezone=True)),
                  Column("kind", JSON))
    stmt = insert(table).values(id=bindparam("i", type_=Integer),
                                doc=bindparam("doc", type_=JSON),
                                at=bindparam("at", type_=DateTime(timezone=True)),
                                kind=literal("probe", type_=JSON)).returning(table.c.id)
    at = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)
    engine = get_engine(database)
    with engine.begin() as conn:
        table.drop(conn, checkfirst=True)
        table.create(conn)
        try:
            conn.execute(stmt, {"i": 1, "doc": {"a": [1, "x"]}, "at": at})
            prebuilt = writes.Prebuilt(stmt, conn.dialect)
            returned = conn.exec_driver_sql(
                prebuilt.sql, prebuilt.parameters({"i": 2, "doc": {"a": [1, "x"]}, "at": at,
                                                   "other_statement_key": 0})).all()
            rows = {r.id: (r.doc, r.at, r.kind) for r in conn.execute(select(table))}
        finally:
            table.drop(conn)
    assert [tuple(r) for r in returned] == [(2,)]
    assert rows[2] == rows[1] and rows[1][0] == {"a": [1, "x"]} and rows[1][2] == "probe"


@pytest.mark.parametrize("at", [datetime(2026, 1, 2, 3, 4, 5), datetime(2026, 1, 2, 3, 4, 5, 60),
                                datetime(5, 6, 7, 8, 9, 10, 999999)])
def test_a_prebuilt_timestamp_is_stored_as_sqlalchemy_stores_it(database, at):
    """The service's naive UTC timestamps, written prebuilt (SQLite: by isoformat, not by
    SQLAlchemy's processor) are stored in the very form SQLAlchemy's own execution stores,
    so comparisons with timestamps written either way hold (whole seconds included)."""
    table = Table("prebuilt_times", MetaData(), Column("id", Integer, primary_key=True),
                  Column("at", DateTime))
    stmt = insert(table).values(id=bindparam("i", type_=Integer),
                                at=bindparam("at", type_=DateTime)).returning(table.c.id)
    engine = get_engine(database)
    with engine.begin() as conn:
        table.drop(conn, checkfirst=True)
        table.create(conn)
        try:
            conn.execute(stmt, {"i": 1, "at": at})
            prebuilt = writes.Prebuilt(stmt, conn.dialect)
            conn.exec_driver_sql(prebuilt.sql, prebuilt.parameters({"i": 2, "at": at}))
            stored = [tuple(r) for r in conn.exec_driver_sql(
                "SELECT id, CAST(at AS TEXT) FROM prebuilt_times ORDER BY id")]
            read = [r.at for r in conn.execute(select(table).order_by(table.c.id))]
            same = conn.execute(select(table.c.id).where(table.c.at == at)
                                .order_by(table.c.id)).scalars().all()
        finally:
            table.drop(conn)
    assert stored[0][1] == stored[1][1]
    assert read == [at, at] and same == [1, 2]
