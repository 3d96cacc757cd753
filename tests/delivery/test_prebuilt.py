"""The delivery writes' prebuilt statements (writes.Prebuilt): compiled once, they give the
same rows as SQLAlchemy's own execution, with literals, repeated parameters and typed values
(JSON, timestamps) laid out as SQLAlchemy would, and a missing value is an error."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import JSON, BigInteger, DateTime, bindparam, cast, literal, select

from chalicelib.db.engine import get_engine
from chalicelib.services.delivery import writes
from tests.conftest import TEST_DATABASE_URL

pytestmark = [pytest.mark.postgres_only,
              pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                                 reason="prebuilt statements are PostgreSQL's path")]


def _statement():
    n = bindparam("n", type_=BigInteger)
    return select(literal("tag").label("tag"), cast(n + n, BigInteger).label("id"),
                  cast(bindparam("doc", type_=JSON), JSON).label("doc"),
                  bindparam("at", type_=DateTime(timezone=True)).label("at"),
                  literal(None, type_=JSON).label("nothing"))


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
