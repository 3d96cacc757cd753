"""What row-level security costs (issue 25), in one run on PostgreSQL: the same work with the
policies on (migration 0011, as deployed) and off (row-level security disabled on every table
for that round), rounds alternating between the two so the machine's load falls on both. The
service connects as its own role in both arms (DATABASE_URL; DATABASE_OWNER_URL migrates and
switches the policies), so both send the tenant settings in front of their statements; what
the settings alone cost is the last figure.

1. send: POST /api/v2/server/messages, one recipient, over HTTP (a client process, one
   keep-alive connection): messages accepted per second;
2. batch: POST /api/v2/server/messages/batch with 500 entries: messages accepted per second;
3. pipeline: N messages through the batch API, delivered by 2 worker processes to a loopback
   MX, each MessageSent webhook POSTed to a receiver (bench_pipeline_lambda.py's machinery):
   messages per second from the first POST to the last webhook;
4. the settings alone: one-statement transactions of the service's role, with the settings
   pipelined in front (an engine with db/tenancy.py's events) against the same without;
5. database time: the statements one send runs (the API key's lookup, then the send, in a
   transaction rolled back) and one delivery runs (the worker's claim, marker and outcome),
   each replayed as EXPLAIN (ANALYZE) with the settings they ran with, policies on and off:
   the sum of the statements' median planning + execution time. Less sensitive to the
   machine's load than the rates (one backend, no client), and it shows where the cost is:
   pg8000's statements are planned every time, and each protected table in a statement adds
   its policies to the plan. (The replayed delivery statements find their row already done,
   so their execution is a little cheaper than the first time; planning is the same.)

Ratios: on / off (or with / without; database time: off / on), higher is better; aim >= 0.95
(under 5% cost).

Run: .venv/bin/python bench/bench_rls.py [--seconds 2] [--rounds 3] [--messages 500]
     BENCH_DATABASE_URL: the owner's URL (its public schema is dropped and re-created;
     default: a dedicated database ``test_rls_bench``, created when missing); the service's
     role is ``<database>_app``, made by the migrate step."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_pipeline import prepare_world, stop_sinks  # noqa: E402
from bench.bench_pipeline_lambda import run_workers, start_stack  # noqa: E402
from bench.common import http_post_rate  # noqa: E402

DEFAULT_URL = "postgresql+pg8000://postgres@127.0.0.1:5432/test_rls_bench"


def service_url(owner_url: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(owner_url)
    return url.set(username=f"{url.database}_app", password=f"{url.database}-app-pw") \
        .render_as_string(hide_password=False)


def switch(owner, on: bool) -> None:
    """Row-level security on or off for every table migration 0011 protects."""
    from sqlalchemy import text

    with owner.begin() as conn:
        tables = list(conn.execute(text(
            "SELECT DISTINCT tablename FROM pg_policies WHERE schemaname = 'public'")).scalars())
        for table in tables:
            conn.execute(text(f"ALTER TABLE {table} {'ENABLE' if on else 'DISABLE'} ROW LEVEL "
                              "SECURITY"))


def settings_rate(engine, tenant, seconds: float) -> float:
    """One-statement transactions per second on ``engine``, acting for ``tenant``."""
    from sqlalchemy import text

    from chalicelib.db import tenancy

    statement = text("SELECT CAST(:n AS integer)")
    with engine.connect() as conn:
        tenancy.act(conn, tenant)
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            with conn.begin():
                conn.execute(statement, {"n": count})
            count += 1
        return count / (time.perf_counter() - started)


class Recorder:
    """The statements an engine runs (with their parameters and the tenant settings they ran
    with) while ``on``."""

    def __init__(self, *engines):
        from sqlalchemy import event

        self.statements: list[tuple[str, object, tuple]] = []
        self.on = False
        for engine in engines:
            event.listen(engine, "before_cursor_execute", self._record)

    def _record(self, conn, cursor, statement, parameters, context, executemany) -> None:
        from chalicelib.db import tenancy

        if self.on and not statement.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK")):
            self.statements.append((statement, parameters, tenancy.current(conn).settings()))


def database_ms(url: str, statements, repeat: int) -> float:
    """Sum over ``statements`` of the median planning + execution time (ms) of ``repeat``
    EXPLAIN (ANALYZE) replays, each in a transaction rolled back, as the service's role with
    the settings the statement ran with."""
    import pg8000
    from sqlalchemy.engine import make_url

    from chalicelib.db import tenancy

    parsed = make_url(url)
    conn = pg8000.connect(user=parsed.username, password=parsed.password, host=parsed.host,
                          port=parsed.port or 5432, database=parsed.database)
    total = 0.0
    try:
        for statement, parameters, settings in statements:
            samples = []
            for _ in range(repeat):
                cursor = conn.cursor()
                cursor.execute("SELECT " + ", ".join(
                    f"set_config('{name}', %s, true)" for name in tenancy.SETTINGS), settings)
                cursor.execute("EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) " + statement,
                               parameters or ())
                plan = cursor.fetchall()[0][0][0]
                samples.append(plan["Planning Time"] + plan["Execution Time"])
                conn.rollback()
            total += statistics.median(samples)
    finally:
        conn.close()
    return total


class _Request:
    """What api/auth.py reads of a request."""

    def __init__(self, headers: dict[str, str]):
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.method = "POST"


def capture(tenant, server_id: int, body: dict, headers: dict) -> tuple[list, list]:
    """The statements of one send (authentication, then the send; rolled back) and of one
    delivery (the worker's claim, marker and outcome)."""
    from chalicelib.api import auth
    from chalicelib.api.principal import SERVER
    from chalicelib.api.request_bodies.messages import SendRequest
    from chalicelib.db import session_scope
    from chalicelib.db.engine import autocommit_engine, get_engine
    from chalicelib.services.delivery import process
    from chalicelib.services.sending import submission

    recorder = Recorder(get_engine(), autocommit_engine())
    with session_scope() as db:
        recorder.on = True
        principal = auth.authenticate(SERVER, _Request(headers), db)
        submission.submit(db, principal.server, SendRequest.model_validate(body))
        db.flush()
        recorder.on = False
        db.rollback()
        db.info.pop("after_commit", None)  # nothing of that send happened
    send, recorder.statements = recorder.statements, []
    with session_scope() as db:
        principal = auth.authenticate(SERVER, _Request(headers), db)
        message_id = submission.submit(db, principal.server,
                                       SendRequest.model_validate(body))["recipients"][0]["id"]
    recorder.on = True
    assert process.process(message_id) == "Sent"
    recorder.on = False
    return send, recorder.statements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of a timed round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per arm")
    parser.add_argument("--messages", type=int, default=500, help="messages per pipeline run")
    parser.add_argument("--replays", type=int, default=30,
                        help="EXPLAIN ANALYZE replays per statement (database time)")
    args = parser.parse_args()
    owner_url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    assert owner_url.startswith("postgresql"), "row-level security is PostgreSQL's"
    ctx, sinks, counts, stop, _, hook_url = prepare_world(owner_url)
    os.environ.update(DATABASE_URL=service_url(owner_url), DATABASE_OWNER_URL=owner_url)

    import logging

    logging.disable(logging.WARNING)
    from sqlalchemy import create_engine, select

    from chalicelib.db import tenancy
    from chalicelib.db.engine import get_engine
    from chalicelib.db.models import Server
    from tests.support import all_tenants

    stack, api, tenant = start_stack(hook_url)
    owner = create_engine(owner_url)
    arms: dict[tuple[str, bool], list[float]] = {}
    try:
        assert not stack.notes, stack.notes  # the service's role is bound by the policies
        with all_tenants() as db:
            server_id = db.scalar(select(Server.id).where(Server.permalink == tenant.server))
        headers = {"X-Server-API-Key": tenant.api_key}
        one = {"from": f"Bench <app@{tenant.domain}>", "to": ["user@example.net"],
               "subject": "Your receipt", "text_body": "Thanks for your order.\n" * 20}
        batch = {"messages": [dict(one, to=[f"user{i}@example.net"]) for i in range(500)]}
        # Warm-up, not measured: imports, caches and connection pools of both paths.
        http_post_rate(stack.base_url, "/api/v2/server/messages", one, headers, 201,
                       seconds=args.seconds, rounds=1)
        http_post_rate(stack.base_url, "/api/v2/server/messages/batch", batch, headers, 200,
                       seconds=args.seconds, rounds=1)
        run_workers(ctx, api, tenant, counts, 2, 50, "warm-up", (0, 0))
        sent = hooks = 50
        for round_no in range(args.rounds):
            for on in ((True, False) if round_no % 2 == 0 else (False, True)):
                switch(owner, on)
                arms.setdefault(("send", on), []).append(http_post_rate(
                    stack.base_url, "/api/v2/server/messages", one, headers, 201,
                    seconds=args.seconds, rounds=1))
                arms.setdefault(("batch", on), []).append(500 * http_post_rate(
                    stack.base_url, "/api/v2/server/messages/batch", batch, headers, 200,
                    seconds=args.seconds, rounds=1))
                seconds, *_ = run_workers(ctx, api, tenant, counts, 2, args.messages,
                                          f"r{round_no}{'on' if on else 'off'}", (sent, hooks))
                sent, hooks = sent + args.messages, hooks + args.messages
                arms.setdefault(("pipeline", on), []).append(args.messages / seconds)
        switch(owner, True)
        send, delivery = capture(tenant, server_id, one, headers)
        for round_no in range(args.rounds):
            for on in ((True, False) if round_no % 2 == 0 else (False, True)):
                switch(owner, on)
                for name, statements in (("send", send), ("delivery", delivery)):
                    arms.setdefault((f"db {name}", on), []).append(
                        database_ms(os.environ["DATABASE_URL"], statements, args.replays))
        switch(owner, True)
        plain = create_engine(os.environ["DATABASE_URL"], pool_size=1, max_overflow=0)
        acting = get_engine(os.environ["DATABASE_URL"])
        for round_no in range(args.rounds):
            for with_settings in ((True, False) if round_no % 2 == 0 else (False, True)):
                engine = acting if with_settings else plain
                arms.setdefault(("settings", with_settings), []).append(
                    settings_rate(engine, tenancy.for_server(server_id), args.seconds))
        plain.dispose()
    finally:
        switch(owner, True)
        stack.stop()
        stop_sinks(stop, sinks)
        owner.dispose()
    print(f"row-level security, PostgreSQL, {args.rounds} alternating rounds per arm of "
          f"{args.seconds:.0f} s (pipeline: {args.messages} messages, 2 worker processes); "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| measure | on (best / median) | off (best / median) | ratio best | ratio of medians "
          "| aim |")
    print("|---|---|---|---|---|---|")
    names = {"send": "send, 1 recipient/request, messages/s",
             "batch": "batch, 500 entries/request, messages/s",
             "pipeline": "pipeline (batch API -> 2 workers -> MX + webhook), messages/s",
             "settings": "one-statement transactions/s: settings in front (on) vs none (off)"}
    for key, name in names.items():
        on, off = arms[(key, True)], arms[(key, False)]
        print(f"| {name} | {max(on):.0f} / {statistics.median(on):.0f} | {max(off):.0f} / "
              f"{statistics.median(off):.0f} | {max(on) / max(off):.2f} | "
              f"{statistics.median(on) / statistics.median(off):.2f} | >= 0.95 |")
    for key, count in (("send", len(send)), ("delivery", len(delivery))):
        on, off = arms[(f"db {key}", True)], arms[(f"db {key}", False)]
        print(f"| database ms per {key} ({count} statements, planning + execution; lower is "
              f"better) | {min(on):.3f} / {statistics.median(on):.3f} | {min(off):.3f} / "
              f"{statistics.median(off):.3f} | {min(off) / min(on):.2f} | "
              f"{statistics.median(off) / statistics.median(on):.2f} | >= 0.95 |")


if __name__ == "__main__":
    main()
