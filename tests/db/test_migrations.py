"""Migrations create the schema the models describe, on PostgreSQL and SQLite, and go down
and up again cleanly."""
from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

import chalicelib.db.models  # noqa: F401
from chalicelib.db import migrate
from chalicelib.db.base import Base
from tests.conftest import TEST_DATABASE_URL


def test_migrated_schema_matches_the_models(database):
    engine = create_engine(database)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                 Base.metadata)
    engine.dispose()
    assert diffs == [], "models changed without a migration: run `make migration m='what changed'`"


def test_downgrade_to_empty_and_upgrade_again(tmp_path):
    url = f"sqlite:///{tmp_path}/updown.db"
    migrate.upgrade(url)
    engine = create_engine(url)
    assert "messages" in inspect(engine).get_table_names()
    migrate.downgrade(url, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    migrate.upgrade(url)
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    engine.dispose()


def _one_server(conn) -> None:
    """An organization with one server, as the early schema (0003 on) holds them."""
    from sqlalchemy import text

    conn.execute(text("INSERT INTO organizations (uuid, name, permalink, time_zone, "
                      "created_at, updated_at) VALUES ('o', 'O', 'o', 'UTC', "
                      "'2026-01-01', '2026-01-01')"))
    conn.execute(text("INSERT INTO servers (uuid, organization_id, name, permalink, mode, "
                      "track_opens, track_clicks, message_retention_days, created_at, "
                      "updated_at) SELECT 's', id, 'S', 's', 'Live', 1, 1, 60, "
                      "'2026-01-01', '2026-01-01' FROM organizations"))


def test_existing_suppressions_get_reasons_from_their_source(tmp_path):
    """0007 keeps every existing suppression (for every stream), its free-text reason as
    details, and derives the reason code from what added it."""
    from sqlalchemy import text

    url = f"sqlite:///{tmp_path}/reasons.db"
    migrate.upgrade(url, "0003")
    engine = create_engine(url)
    with engine.begin() as conn:
        _one_server(conn)
        for address, source in (("a@x.example", "hard_fail"), ("b@x.example", "bounce"),
                                ("c@x.example", "complaint"), ("d@x.example", "manual"),
                                ("e@x.example", "api")):
            conn.execute(text("INSERT INTO suppressions (server_id, address, reason, source, "
                              "created_at) SELECT id, :a, 'why ' || :s, :s, '2026-01-01' "
                              "FROM servers"), {"a": address, "s": source})
    migrate.upgrade(url)
    with engine.connect() as conn:
        rows = {a: (code, why, key) for a, code, why, key in conn.execute(text(
            "SELECT address, reason_code, reason, stream_key FROM suppressions"))}
    engine.dispose()
    assert rows == {"a@x.example": ("HardBounce", "why hard_fail", 0),
                    "b@x.example": ("HardBounce", "why bounce", 0),
                    "c@x.example": ("SpamComplaint", "why complaint", 0),
                    "d@x.example": ("Manual", "why manual", 0),
                    "e@x.example": ("Manual", "why api", 0)}


@pytest.mark.postgres_only
@pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"), reason="PostgreSQL's policies")
def test_row_level_security_goes_down_and_up_and_bridges_a_database_in_use():
    """0011 on a database that has tenants adds the before_tenancy bridge (the release being
    replaced connects as the owner), and its downgrade leaves no policy or function behind.
    On a scratch database named after the suite's (databases are shared in a cluster)."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    base = make_url(TEST_DATABASE_URL)
    name = f"{base.database}_updown"
    url = base.set(database=name).render_as_string(hide_password=False)
    admin = create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT",
                          poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(url, poolclass=NullPool)

    def policies() -> set[tuple[str, str]]:
        with engine.connect() as conn:
            return set(conn.execute(text("SELECT tablename, policyname FROM pg_policies")))

    try:
        migrate.upgrade(url, "0007")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO organizations (uuid, name, permalink, time_zone, "
                              "created_at, updated_at) VALUES ('o', 'O', 'o', 'UTC', now(), "
                              "now())"))
        migrate.upgrade(url)
        assert ("messages", "before_tenancy") in policies()
        assert ("messages", "tenant_server") in policies()
        migrate.downgrade(url, "0007")
        assert policies() == set()
        with engine.connect() as conn:
            assert not conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname LIKE "
                                         "'tenant\\_%'")).scalar()
        migrate.upgrade(url)
        assert ("messages", "tenant_server") in policies()
    finally:
        engine.dispose()
        from chalicelib.db.engine import get_engine

        get_engine(url).dispose()  # the migrations' pooled connections
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_hourly_engagement_counters_are_built_from_the_kept_events(tmp_path):
    """0012 counts the opens and clicks already stored per UTC hour, as the listener counts
    new ones, so GET /stats/engagement?interval=hour shows the time before the upgrade."""
    from sqlalchemy import text

    url = f"sqlite:///{tmp_path}/engagement.db"
    migrate.upgrade(url, "0007")
    engine = create_engine(url)
    with engine.begin() as conn:
        _one_server(conn)
        for at, machine, first in (("2026-01-02 10:05:00.000000", 0, 1),
                                   ("2026-01-02 10:59:59.000000", 1, 0),
                                   ("2026-01-02 11:00:00.000000", 0, 0)):
            # message 1 need not exist: this engine does not enforce foreign keys
            conn.execute(text("INSERT INTO open_events (message_id, server_id, likely_machine, "
                              "first, created_at) SELECT 1, id, :m, :f, :at FROM servers"),
                         {"m": machine, "f": first, "at": at})
    migrate.upgrade(url)
    with engine.connect() as conn:
        rows = {(bucket, metric): count for bucket, metric, count in conn.execute(text(
            "SELECT bucket, metric, count FROM stat_counters WHERE period = 'hour'"))}
    engine.dispose()
    assert rows == {("2026-01-02 10:00:00.000000", "opens"): 2,
                    ("2026-01-02 10:00:00.000000", "machine_opens"): 1,
                    ("2026-01-02 10:00:00.000000", "unique_opens"): 1,
                    ("2026-01-02 11:00:00.000000", "opens"): 1}


def test_sent_messages_are_sized_by_the_bytes_they_were_sent_as(tmp_path):
    """0014: a message prepared for sending before its size followed the bytes sent gets
    their size; one never prepared keeps its submission's."""
    from sqlalchemy import text

    url = f"sqlite:///{tmp_path}/sizes.db"
    migrate.upgrade(url, "0007")
    engine = create_engine(url)
    with engine.begin() as conn:
        _one_server(conn)
        for token in ("sent", "held"):
            conn.execute(text(
                "INSERT INTO messages (server_id, token, scope, bounce, rcpt_to, mail_from, "
                "size, status, held, track_opens, track_clicks, attempts, opens_count, "
                "clicks_count, created_at, updated_at) SELECT id, :t, 'outgoing', 0, "
                "'a@x.example', 'b@x.example', 282, 'Sent', 0, 0, 0, 1, 0, 0, '2026-01-01', "
                "'2026-01-01' FROM servers"), {"t": token})
        conn.execute(text("INSERT INTO message_raws (message_id, raw) SELECT id, :raw "
                          "FROM messages WHERE token = 'sent'"), {"raw": b"x" * 1202})
    migrate.upgrade(url)
    with engine.connect() as conn:
        sizes = dict(conn.execute(text("SELECT token, size FROM messages")).all())
    engine.dispose()
    assert sizes == {"sent": 1202, "held": 282}


@pytest.mark.postgres_only
@pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"), reason="PostgreSQL's TOAST")
def test_raw_messages_are_compressed_with_lz4_and_read_back(tenant):
    """0016: raw sources are compressed with lz4 (pglz cost the database ~10x the CPU per
    message); a large raw message still reads back byte for byte."""
    from sqlalchemy import text

    from tests.support import all_tenants

    with all_tenants() as db:
        available = db.execute(text(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
            "WHERE name = 'default_toast_compression'")).scalar()
        if not available:
            pytest.skip("this PostgreSQL was built without lz4")
        methods = dict(db.execute(text(
            "SELECT attrelid::regclass::text, attcompression FROM pg_attribute "
            "WHERE attname = 'raw' AND attrelid IN ('submissions'::regclass, "
            "'message_raws'::regclass)")).all())
        assert methods == {"submissions": "l", "message_raws": "l"}
        raw = b"Subject: big\r\n\r\n" + b"The quick brown fox.\r\n" * 2000
        server_id = db.execute(text("SELECT min(id) FROM servers")).scalar()
        row_id = db.execute(text(
            "INSERT INTO submissions (server_id, message_id_header, size, raw, created_at) "
            "VALUES (:s, 'lz4@test', :n, :raw, now()) RETURNING id"),
            {"s": server_id, "n": len(raw), "raw": raw}).scalar()
        assert db.execute(text("SELECT pg_column_compression(raw) FROM submissions "
                               "WHERE id = :i"), {"i": row_id}).scalar() == "lz4"
        assert bytes(db.execute(text("SELECT raw FROM submissions WHERE id = :i"),
                                {"i": row_id}).scalar()) == raw
        db.execute(text("DELETE FROM submissions WHERE id = :i"), {"i": row_id})
