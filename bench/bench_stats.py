"""Stats on 1 million messages: GET /stats's query (services/stats.summary) over a 30-day range
holding every message of the server, and /stats/deliveries (daily buckets), against a bare
``SELECT count(*)`` over the same table in the same run. Aim: under 10x.

The data is generated inside PostgreSQL (INSERT ... SELECT generate_series): 1,000,000
messages over 30 days in 3 streams, 21 tags (and untagged), 6 statuses, 2% incoming bounces;
300,000 opens, 100,000 clicks and 1,200,000 delivery events. Plain SQL bypasses the listener
that keeps the rolled-up counters, so ``counters.rebuild`` rolls them up once (timed too);
then VACUUM ANALYZE, as autovacuum would.

Measured: a 30-day range aligned to days (counters only), a 7.5-day range with partial days
at both ends (counters + two short row scans), and daily delivery outcomes.

Run: BENCH_DATABASE_URL=postgresql+pg8000://postgres@127.0.0.1:5432/<db> \
     .venv/bin/python bench/bench_stats.py     (the database's public schema is replaced)"""
from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import TABLE_HEAD, bench_database_url, prepare_database, row, timed  # noqa: E402

MESSAGES = int(os.environ.get("BENCH_STATS_MESSAGES", "1000000"))
T0 = datetime(2030, 1, 1)
DAYS = 30

GENERATE = """
INSERT INTO organizations (uuid, name, permalink, time_zone, created_at, updated_at)
VALUES ('00000000-0000-0000-0000-000000000001', 'Bench', 'bench', 'UTC', now(), now());
INSERT INTO servers (uuid, organization_id, name, permalink, mode, track_opens, track_clicks,
                     message_retention_days, created_at, updated_at)
VALUES ('00000000-0000-0000-0000-000000000002', 1, 'Main', 'main', 'Live', true, true, 60,
        now(), now());
INSERT INTO streams (server_id, name, permalink, stream_type, is_default, created_at, updated_at)
SELECT 1, 'Stream ' || s, 's' || s, 'transactional', s = 1, now(), now()
FROM generate_series(1, 3) s;
INSERT INTO messages (server_id, token, scope, bounce, rcpt_to, mail_from, subject, tag,
                      stream_id, size, status, held, track_opens, track_clicks, attempts,
                      opens_count, clicks_count, created_at, updated_at)
SELECT 1, md5(i::text), CASE WHEN mod(i, 50) = 0 THEN 'incoming' ELSE 'outgoing' END, mod(i, 50) = 0,
       'r' || i || '@example.net', 'sender@example.com', 'Subject ' || (mod(i, 100)),
       CASE WHEN mod(i, 22) = 0 THEN NULL ELSE 'tag-' || (mod(i, 21)) END, 1 + mod(i, 3), 2048,
       (ARRAY['Sent','Sent','Sent','Sent','Sent','Sent','SoftFail','HardFail','Held','Pending'])
           [1 + mod(i * 7, 10)],
       mod(i * 7, 10) = 8, true, true, 1, 0, 0, ts, ts
FROM (SELECT i, CAST(:t0 AS timestamp) + (i * (:days * 86400.0 / :n)) * interval '1 second' AS ts
      FROM generate_series(1, :n) i) g;
INSERT INTO tracked_links (message_id, token, url, created_at)
SELECT i * 10, md5('l' || i), 'https://example.org/' || i, CAST(:t0 AS timestamp)
FROM generate_series(1, :n / 10) i;
INSERT INTO open_events (message_id, server_id, ip_address, user_agent, likely_machine, first,
                         stream_id, tag, created_at)
SELECT m.id, 1, '192.0.2.1', 'Mozilla/5.0', mod(m.id, 5) = 0, true, m.stream_id, m.tag,
       m.created_at + interval '1 hour'
FROM messages m WHERE mod(m.id, 10) < 3;
INSERT INTO click_events (message_id, server_id, link_id, url, likely_machine, first,
                          stream_id, tag, created_at)
SELECT l.message_id, 1, l.id, l.url, false, true, m.stream_id, m.tag, m.created_at + interval '2 hours'
FROM tracked_links l JOIN messages m ON m.id = l.message_id;
INSERT INTO message_events (message_id, server_id, event, uuid, details, created_at)
SELECT 1 + mod(i, :n), 1,
       (ARRAY['MessageSent','MessageSent','MessageSent','MessageDelayed','MessageDeliveryFailed',
              'MessageHeld'])[1 + mod(i, 6)],
       md5('e' || i), 'bench', CAST(:t0 AS timestamp) + (i * (:days * 86400.0 / (:n * 1.2))) * interval '1 second'
FROM generate_series(1, (:n * 1.2)::int) i;
"""


def _reset_and_generate(url: str) -> None:
    from sqlalchemy import create_engine, text

    from chalicelib.db import migrate

    prepare_database(url)
    migrate.upgrade(url)
    engine = create_engine(url)
    started = time.perf_counter()
    with engine.begin() as conn:
        for statement in filter(str.strip, GENERATE.split(";\n")):
            conn.execute(text(statement), {"t0": T0, "days": DAYS, "n": MESSAGES})
    generated = time.perf_counter()
    # Plain SQL bypasses the ORM listener that keeps the counters, so roll them up once.
    from chalicelib.db import counters, session_scope

    with session_scope() as db:
        rows = counters.rebuild(db)
    rebuilt = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    print(f"generated {MESSAGES:,} messages and their events in {generated - started:.1f} s; "
          f"counters rebuilt ({rows:,} rows) in {rebuilt - generated:.1f} s", file=sys.stderr)
    engine.dispose()


def main() -> None:
    url = bench_database_url()
    if not url.startswith("postgresql"):
        sys.exit("bench_stats needs PostgreSQL (BENCH_DATABASE_URL)")
    _reset_and_generate(url)

    from sqlalchemy import text

    from chalicelib.db import session_scope
    from chalicelib.services.tracking import stats

    start, end = T0, T0 + timedelta(days=DAYS + 1)
    with session_scope() as db:
        summary = stats.summary(db, 1, start, end)
        assert summary["messages"] + summary["incoming"] == MESSAGES, summary["messages"]
        edges = stats.summary(db, 1, start + timedelta(hours=7), start + timedelta(days=7, hours=19))
        exact = db.scalar(text(
            "SELECT count(*) FROM messages WHERE created_at >= :a AND created_at < :b"),
            {"a": start + timedelta(hours=7), "b": start + timedelta(days=7, hours=19)})
        assert edges["messages"] + edges["incoming"] == exact, (edges["messages"], exact)
        daily = stats.deliveries(db, 1, start, end, "day")
        assert sum(daily["totals"].values()) == int(MESSAGES * 1.2)
        count_messages = timed(lambda: db.scalar(text("SELECT count(*) FROM messages")))
        ours = timed(lambda: stats.summary(db, 1, start, end))
        count_events = timed(lambda: db.scalar(text("SELECT count(*) FROM message_events")))
        deliveries = timed(lambda: stats.deliveries(db, 1, start, end, "day"))
        week = timed(lambda: stats.summary(db, 1, start + timedelta(hours=7),
                                           start + timedelta(days=7, hours=19)))
    print(TABLE_HEAD)
    print(row(f"GET /stats, 30 days = all {MESSAGES:,} messages (+ opens, clicks)",
              f"{ours * 1000:.0f} ms", f"{count_messages * 1000:.0f} ms (count(*) messages)",
              ours / count_messages, "< 10x"))
    print(row("GET /stats, 7.5 days, partial days at both ends", f"{week * 1000:.0f} ms",
              f"{count_messages * 1000:.0f} ms (count(*) messages)", week / count_messages,
              "< 10x"))
    print(row(f"GET /stats/deliveries, daily, {int(MESSAGES * 1.2):,} outcome events",
              f"{deliveries * 1000:.0f} ms",
              f"{count_events * 1000:.0f} ms (count(*) message_events)",
              deliveries / count_events, "< 10x"))


if __name__ == "__main__":
    main()
