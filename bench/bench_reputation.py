"""The reputation guard's and the retired return paths' costs (issue 34, items 5 and 8), on
PostgreSQL, each against a baseline measured in the same run:

* counting one bounce about the address (``guard.count``: its mark, its hourly counter and
  the server's evaluation over a full window of 168 hourly buckets of sent and failed
  mail), against a bare transaction that inserts one mark row (what any record of the bounce
  costs). A message that is simply sent costs the guard nothing (its outcome's counters are
  written anyway): nothing to measure there.
* the gateway's RCPT check of a domain return path (``return_path.is_domain_return_path``:
  the current host, or a retired one still kept), with 2,000 domains and 2,000 retired
  hosts, against the check of the current host alone (what it was before).

Run: BENCH_DATABASE_URL=postgresql+pg8000://postgres@127.0.0.1:5432/<db> \\
     .venv/bin/python bench/bench_reputation.py     (the database's public schema is replaced)
"""
from __future__ import annotations

import itertools
import os
import sys
from collections import Counter
from datetime import timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import TABLE_HEAD, bench_database_url, prepare_database, rate, row  # noqa: E402

DOMAINS = 2000
BOUNCES = int(os.environ.get("BENCH_REPUTATION_BOUNCES", "20000"))  # more than counted


def main() -> None:
    url = bench_database_url()
    prepare_database(url, REPUTATION_MIN_VOLUME="1000000")  # counted, never paused
    from chalicelib.db import migrate

    migrate.upgrade(url)
    from sqlalchemy import exists, insert, select

    from chalicelib import clock, statuses
    from chalicelib.db import counters, session_scope, tenancy
    from chalicelib.db.models import (Domain, Message, Organization, ReputationMark,
                                      RetiredReturnPath, Server)
    from chalicelib.services.inbound import return_path
    from chalicelib.services.reputation import guard

    now = clock.now()
    with session_scope() as db, tenancy.acting(db, tenancy.instance_admin()):
        org = Organization(name="Bench", permalink="bench")
        db.add(org)
        db.flush()
        server = Server(organization_id=org.id, name="Main", permalink="main")
        db.add(server)
        db.flush()
        sid = server.id
        deltas: Counter = Counter()
        for hour in range(170):  # a full window of a busy server
            at = now - timedelta(hours=hour)
            deltas[(sid, "hour", counters.truncate(at, "hour"), "event:MessageSent", "")] += 900
            deltas[(sid, "hour", counters.truncate(at, "hour"),
                    "event:MessageDeliveryFailed", "")] += 20
        counters.apply(db.connection(), deltas)
        db.execute(insert(Message), [
            {"server_id": sid, "token": f"b{i:030d}", "rcpt_to": f"r{i}@example.net",
             "mail_from": "app@example.com", "scope": "outgoing", "status": statuses.SENT}
            for i in range(BOUNCES)])
        db.execute(insert(Domain), [
            {"server_id": sid, "name": f"d{i}.example.com", "verification_token": "t",
             "dkim_selector": "s", "dkim_private_key_encrypted": "x", "dkim_public_key": "x",
             "return_path_host": "rp", "uuid": f"00000000-0000-0000-0000-{i:012d}"}
            for i in range(DOMAINS)])
        db.execute(insert(RetiredReturnPath), [
            {"server_id": sid, "name": f"old{i}.d{i}.example.com", "retired_at": now,
             "keep_until": now + timedelta(days=60)} for i in range(DOMAINS)])
        ids = list(db.scalars(select(Message.id).order_by(Message.id)))
    marks = itertools.count()
    bounces = iter(ids)

    def bare_mark():  # one message, a kind of its own each time (the unique key)
        with session_scope() as db, tenancy.acting(db, tenancy.for_servers([sid])):
            db.execute(insert(ReputationMark).values(server_id=sid, message_id=ids[-1],
                                                     kind=f"b{next(marks)}", created_at=now))

    def counted_bounce():
        with session_scope() as db, tenancy.acting(db, tenancy.for_servers([sid])):
            assert guard.count(db, sid, next(bounces), guard.BOUNCE, "no_such_user")

    print(TABLE_HEAD)
    ours, base = rate(counted_bounce, seconds=1.0), rate(bare_mark, seconds=1.0)
    print(row("a bounce counted (mark, counter, evaluation of a 168-hour window)",
              f"{ours:.0f}/s", f"{base:.0f}/s (insert one mark)", base / ours, "<= 5x"))

    domain = Domain.__table__
    address = f"token@rp.d{DOMAINS // 2}.example.com"
    retired = f"token@old{DOMAINS // 3}.d{DOMAINS // 3}.example.com"

    def check(addr):
        def run():
            with session_scope() as db, tenancy.acting(db, tenancy.instance_admin()):
                assert return_path.is_domain_return_path(db, addr)
        return run

    def current_only():
        with session_scope() as db, tenancy.acting(db, tenancy.instance_admin()):
            assert db.scalar(select(exists().where(
                domain.c.name == f"d{DOMAINS // 2}.example.com",
                domain.c.return_path_host == "rp")))

    base = rate(current_only, seconds=1.0)
    for name, addr in (("current host", address), ("retired host", retired)):
        ours = rate(check(addr), seconds=1.0)
        print(row(f"RCPT check of a domain return path, {name}", f"{ours:.0f}/s",
                  f"{base:.0f}/s (current host only)", base / ours, "<= 2x"))


if __name__ == "__main__":
    main()
