"""The engine's PostgreSQL round-trip savings: pg8000 statements pipelined into one flush
(errors at each protocol step still raise and leave the connection usable) and the
autocommit engine (a statement is committed on its own, nothing left open)."""
from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, ProgrammingError

from chalicelib.db.engine import autocommit_engine, get_engine
from tests.conftest import TEST_DATABASE_URL

postgres_only = pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                                   reason="needs PostgreSQL (pg8000 protocol)")
pytestmark = [pytest.mark.postgres_only, postgres_only]


@pytest.fixture
def scratch(database):
    engine = get_engine(database)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS pg8000_pipeline_probe "
                          "(id integer PRIMARY KEY, note text)"))
        conn.execute(text("DELETE FROM pg8000_pipeline_probe"))
    yield engine
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE pg8000_pipeline_probe"))


def test_pipelined_statements_return_rows_counts_and_nulls(scratch):
    with scratch.begin() as conn:
        inserted = conn.execute(text("INSERT INTO pg8000_pipeline_probe VALUES (:a, :n), (:b, NULL) "
                                     "RETURNING id, note"), {"a": 1, "n": "x", "b": 2}).all()
        assert [tuple(r) for r in inserted] == [(1, "x"), (2, None)]
        updated = conn.execute(text("UPDATE pg8000_pipeline_probe SET note = :n"), {"n": "y"})
        assert updated.rowcount == 2
        assert conn.execute(text("SELECT count(*) FROM pg8000_pipeline_probe WHERE id > :i"),
                            {"i": 5}).scalar_one() == 0


@pytest.mark.parametrize("sql, params", [
    ("SELEC 1", {}),                                                     # fails at Parse
    ("SELECT id FROM pg8000_pipeline_probe WHERE id = :i", {"i": "abc"}),  # fails at Bind
    ("SELECT 1 / (:z - :z)", {"z": 3}),                                  # fails at Execute
])
def test_an_error_at_any_step_raises_and_the_connection_stays_usable(scratch, sql, params):
    with scratch.connect() as conn:
        with pytest.raises((DBAPIError, ProgrammingError)):
            conn.execute(text(sql), params)
        conn.rollback()
        assert conn.execute(text("SELECT CAST(:v AS integer)"), {"v": 7}).scalar_one() == 7


def test_a_unique_violation_rolls_back_only_its_transaction(scratch):
    with scratch.begin() as conn:
        conn.execute(text("INSERT INTO pg8000_pipeline_probe VALUES (1, 'kept')"))
    with scratch.connect() as conn:
        with pytest.raises(DBAPIError):
            conn.execute(text("INSERT INTO pg8000_pipeline_probe VALUES (:i, 'dup')"), {"i": 1})
        conn.rollback()
        assert conn.execute(text("SELECT note FROM pg8000_pipeline_probe WHERE id = 1")
                            ).scalar_one() == "kept"


def test_autocommit_engine_commits_each_statement_and_leaves_nothing_open(scratch):
    engine = autocommit_engine(TEST_DATABASE_URL)
    assert engine is not None and engine is autocommit_engine(TEST_DATABASE_URL)
    with engine.connect() as conn:
        conn.execute(text("INSERT INTO pg8000_pipeline_probe VALUES (5, 'auto')"))
        # visible to another connection at once: the statement was its own transaction
        with scratch.connect() as other:
            assert other.execute(text("SELECT note FROM pg8000_pipeline_probe WHERE id = 5")
                                 ).scalar_one() == "auto"
        assert not conn.connection.dbapi_connection._in_transaction


def test_driver_patches_only_apply_to_the_release_they_were_written_for(monkeypatch):
    import pg8000

    from chalicelib.db import engine

    assert pg8000.__version__ == engine.PATCHED_PG8000_VERSION  # requirements.txt pins it
    monkeypatch.setattr(pg8000, "__version__", "9.9.9")
    assert engine._pg8000_is_patchable() is False


def test_timestamps_read_back_exactly_including_values_fromisoformat_cannot_read(database):
    from datetime import datetime

    with get_engine(database).connect() as conn:
        row = conn.execute(text(
            "SELECT TIMESTAMP '2026-11-21 19:46:13.995741', TIMESTAMP '2026-01-02 03:04:05', "
            "TIMESTAMP '2026-01-02 03:04:05.5', TIMESTAMP 'infinity'")).one()
    assert row[0] == datetime(2026, 11, 21, 19, 46, 13, 995741)
    assert row[1] == datetime(2026, 1, 2, 3, 4, 5)
    assert row[2] == datetime(2026, 1, 2, 3, 4, 5, 500000)
    assert row[3] == "infinity"  # pg8000's own answer for what datetime cannot hold


def test_database_ssl_modes_build_the_expected_tls_context(monkeypatch, tmp_path):
    import ssl

    from chalicelib.config import get_settings
    from chalicelib.db.engine import database_ssl_context

    monkeypatch.setenv("DATABASE_SSL", "off")
    assert database_ssl_context(get_settings()) is None
    monkeypatch.setenv("DATABASE_SSL", "require")
    context = database_ssl_context(get_settings())
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    monkeypatch.setenv("DATABASE_SSL", "Verify")
    context = database_ssl_context(get_settings())
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    monkeypatch.setenv("DATABASE_SSL_CA", str(tmp_path / "missing.pem"))
    with pytest.raises(FileNotFoundError):
        database_ssl_context(get_settings())
    monkeypatch.setenv("DATABASE_SSL", "sometimes")
    with pytest.raises(Exception, match="off, require, verify"):
        get_settings()


def test_database_ssl_is_asked_of_the_server(monkeypatch, database):
    """The local PostgreSQL has no TLS: a connection that asks for it must fail, which
    proves the engine hands pg8000 the context instead of connecting in the clear."""
    from chalicelib.db.engine import _create_engine

    monkeypatch.setenv("DATABASE_SSL", "require")
    engine = _create_engine(database)
    try:
        with pytest.raises(DBAPIError, match="(?i)ssl"):
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def test_database_ssl_off_never_asks_the_server_for_tls(monkeypatch, database):
    """DATABASE_SSL=off connects in the clear: pg8000 left to its default would open every
    connection with an SSLRequest (and a CA-loading TLS context), and use TLS whenever a
    server offers it. A recording proxy in front of PostgreSQL sees the first message."""
    import socket
    import struct
    import threading

    from sqlalchemy.engine import make_url

    from chalicelib.db.engine import _create_engine

    target = make_url(database)
    first: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def serve():
        client, _ = listener.accept()
        upstream = socket.create_connection((target.host, target.port or 5432))
        first.append(client.recv(8, socket.MSG_PEEK | socket.MSG_WAITALL))
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        pipe(upstream, client)

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setenv("DATABASE_SSL", "off")
    url = target.set(host="127.0.0.1", port=listener.getsockname()[1])
    engine = _create_engine(url.render_as_string(hide_password=False))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()
        listener.close()
    assert first and struct.unpack("!ii", first[0])[1] != 80877103  # not an SSLRequest



def test_a_long_multi_row_insert_is_scanned_once_and_runs_again_correctly(scratch):
    """A batch's INSERT is longer than the short-text cache takes; its text repeats for every
    batch of the same size, so pg8000's char-by-char placeholder scan runs once for it."""
    import pg8000.legacy as legacy

    long_texts = legacy.convert_paramstyle.long_texts
    rows = 1500  # "(%s, %s), " a row: past the short-text limit
    values = ", ".join(f"(:i{k}, :n{k})" for k in range(rows))
    sql = text(f"INSERT INTO pg8000_pipeline_probe VALUES {values} RETURNING note")
    before = long_texts.cache_info()
    for batch in range(2):
        params = {**{f"i{k}": batch * rows + k for k in range(rows)},
                  # placeholder-like values travel as values, never as SQL
                  **{f"n{k}": f"%s {batch}-{k} $1" for k in range(rows)}}
        with scratch.begin() as conn:
            notes = [r[0] for r in conn.execute(sql, params)]
        assert notes == [f"%s {batch}-{k} $1" for k in range(rows)]
    after = long_texts.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)


@pytest.fixture
def named(scratch, monkeypatch, database):
    """A fresh engine whose connections keep named statements (use_named_statements)."""

    from chalicelib.db import engine as engine_module

    monkeypatch.setattr(engine_module, "_named_statements", True)
    engine = engine_module._create_engine(database)
    yield engine
    engine.dispose()


def prepared(conn) -> set[str]:
    return set(conn.execute(text("SELECT statement FROM pg_prepared_statements")).scalars())


def test_named_statements_are_planned_once_and_still_answer_rows_and_errors(named):
    sql = "INSERT INTO pg8000_pipeline_probe VALUES (:i, :n) RETURNING id, note"
    with named.connect() as conn:
        for i in range(3):
            row = conn.execute(text(sql), {"i": i, "n": f"n{i}"}).one()
            assert tuple(row) == (i, f"n{i}")  # rows decoded through the portal's description
        # One named statement for the three runs (pg_prepared_statements shows its SQL).
        assert sum("pg8000_pipeline_probe" in s and "RETURNING" in s for s in prepared(conn)) == 1
        conn.commit()
        with pytest.raises(DBAPIError):  # a duplicate key: Execute fails, Parse had worked
            conn.execute(text(sql), {"i": 1, "n": "again"})
        conn.rollback()
        assert tuple(conn.execute(text(sql), {"i": 7, "n": None}).one()) == (7, None)
        conn.commit()
        fresh = "SELECT note FROM pg8000_pipeline_probe WHERE id = :i"
        with pytest.raises(DBAPIError):  # fails at Bind on its first run (it gets a new name)
            conn.execute(text(fresh), {"i": "abc"})
        conn.rollback()
        assert conn.execute(text(fresh), {"i": 7}).scalar_one() is None
        assert conn.execute(text(fresh), {"i": 2}).scalar_one() == "n2"
        conn.commit()


def test_named_statements_stop_at_the_per_connection_limit(named, monkeypatch):
    from chalicelib.db import engine as engine_module

    monkeypatch.setattr(engine_module, "NAMED_STATEMENTS_PER_CONNECTION", 2)
    with named.connect() as conn:
        for i in range(5):  # five different statements: two are kept, the rest run unnamed
            assert conn.execute(text(f"SELECT {i} + :x"), {"x": 1}).scalar_one() == i + 1
        assert len(conn.connection.dbapi_connection.named_statements) == 2


TRICKY = ["", "NULL", "null", "a,b", "{x}", 'say "hi"', "back\\slash", "\\\"", " lead",
          "trail ", "tab\there", "new\r\nline", "ünïcødé ✓", "comma, \"quote\" \\ all"]


def test_text_and_int_arrays_read_back_as_sent(scratch):
    """engine._flat_array: our encoding of flat lists of str, int, bool, bytes, datetime and
    None (pg8000's goes through singledispatch per element and escapes strings in a
    per-character Python loop) reads back exactly, through PostgreSQL's own array input."""
    from hypothesis import given, settings, strategies as st

    from chalicelib.db.engine import _flat_array

    assert _flat_array([1.5]) is None and _flat_array([[1]]) is None  # left to pg8000
    with scratch.connect() as conn:
        def back(values, cast):
            return conn.execute(text(f"SELECT CAST(:v AS {cast})"), {"v": values}).scalar_one()

        assert back(TRICKY + [None], "TEXT[]") == TRICKY + [None]
        assert back([], "TEXT[]") == []
        assert back([3, -1, 0, 2**40, None], "BIGINT[]") == [3, -1, 0, 2**40, None]
        assert back([True, False, None], "BOOLEAN[]") == [True, False, None]
        blobs = [b"", b"\x00\xff\\\"", bytes(range(256)), None]
        assert [None if b is None else bytes(b) for b in back(blobs, "BYTEA[]")] == blobs
        from datetime import datetime, timedelta, timezone
        naive = [datetime(2026, 11, 26, 12, 0, 0, 123456), datetime(1999, 1, 1), None]
        assert back(naive, "TIMESTAMP[]") == naive
        aware = datetime(2026, 11, 26, 12, 0, tzinfo=timezone(timedelta(hours=2)))
        assert back([aware], "TIMESTAMP[]") == [datetime(2026, 11, 26, 10, 0)]  # in UTC

        @settings(max_examples=60, deadline=None)
        @given(st.lists(st.one_of(st.none(), st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")))))
        def round_trip(values):
            assert back(values, "TEXT[]") == values

        round_trip()
