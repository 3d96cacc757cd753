"""Webhook deliveries per second to a loopback receiver, with signing, against a minimal
reference loop in the same run.

Ours: ``webhook_delivery.process(row_id)`` for each queue row, exactly what a queue worker
does (load the row, claim it with a conditional UPDATE, check the URL, sign, pinned POST, then
delete the row and write the attempt log).
Reference: claim a row with SELECT ... FOR UPDATE SKIP LOCKED, sign with ``cryptography``,
POST over a keep-alive ``requests`` session, delete the row, commit. It writes no log, checks
no URL and keeps no claim, so it is an upper bound, not a like-for-like twin.

Both run single-threaded against the same receiver and the same rows (same body); rows are
inserted before each timed phase. Aim: ours at least half the reference's rate.

Run: .venv/bin/python bench/bench_webhooks.py [--rows 200] [--rounds 5]
     (BENCH_DATABASE_URL picks the database; its public schema is dropped and re-created)"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import TABLE_HEAD, bench_database_url, prepare_database, row  # noqa: E402


def setup_database(url: str) -> None:
    prepare_database(url, WEBHOOKS_ALLOW_PRIVATE_TARGETS="true", QUEUE_BACKEND="local")
    from chalicelib.db import migrate

    migrate.upgrade(url)


def make_webhook(target_url: str) -> tuple[int, int, str]:
    from chalicelib.db import session_scope
    from chalicelib.db.models import Message, Organization, Server
    from chalicelib.services.messages import events
    from chalicelib.services.webhooks import hooks

    with session_scope() as db:
        org = Organization(name="Bench", permalink="bench")
        db.add(org)
        db.flush()
        srv = Server(organization_id=org.id, name="Main", permalink="main")
        db.add(srv)
        db.flush()
        hook = hooks.create(db, srv, name="bench", url=target_url, events_=[],
                               headers={"X-Secret": "bench-secret"})
        message = Message(server_id=srv.id, token=uuid.uuid4().hex, rcpt_to="a@example.net",
                          mail_from="b@example.com", scope="outgoing")
        db.add(message)
        db.flush()
        record = events.MessageEvent(message_id=message.id, server_id=srv.id,
                                     event="MessageSent", uuid=str(uuid.uuid4()),
                                     details="250 OK")
        db.add(record)
        db.flush()
        body = hooks.build_body("MessageSent", record.uuid, int(time.time()),
                                   hooks.message_fields(message), record.details)
        return srv.id, hook.id, body


def insert_rows(server_id: int, webhook_id: int, body: str, count: int) -> list[int]:
    from chalicelib import clock
    from chalicelib.db import session_scope
    from chalicelib.db.models import WebhookRequest

    with session_scope() as db:
        now = clock.now()
        rows = [WebhookRequest(server_id=server_id, webhook_id=webhook_id, event="MessageSent",
                               uuid=str(uuid.uuid4()), body=body, next_attempt_at=now,
                               created_at=now) for _ in range(count)]
        db.add_all(rows)
        db.flush()
        return [r.id for r in rows]


def ours(ids: list[int]) -> float:
    from chalicelib.services.webhooks import deliver

    started = time.perf_counter()
    for row_id in ids:
        outcome = deliver.process(row_id)
        assert outcome == "delivered", outcome
    return len(ids) / (time.perf_counter() - started)


def reference(url: str, target_url: str, count: int) -> float:
    import requests
    from sqlalchemy import create_engine, text

    from chalicelib import clock
    from chalicelib.services.security import keys, signing

    key = keys.signing_key()
    engine = create_engine(url)
    http = requests.Session()
    skip_locked = " FOR UPDATE SKIP LOCKED" if url.startswith("postgresql") else ""
    done = 0
    started = time.perf_counter()
    with engine.connect() as conn:
        while True:
            with conn.begin():
                found = conn.execute(text(
                    "SELECT id, event, uuid, body FROM webhook_requests "
                    "WHERE next_attempt_at <= :now ORDER BY id LIMIT 1"
                    + skip_locked), {"now": clock.now()}).first()
                if found is None:
                    break
                body = found.body.encode()
                signature = signing.sign_body(key, body)
                response = http.post(target_url, data=body, timeout=15, headers={
                    "Content-Type": "application/json", "X-Service-Event": found.event,
                    "X-Service-UUID": found.uuid, "X-Service-Signature": signature,
                    "X-Secret": "bench-secret"})
                assert response.status_code == 200
                conn.execute(text("DELETE FROM webhook_requests WHERE id = :id"),
                             {"id": found.id})
            done += 1
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert done == count, (done, count)
    return done / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200, help="deliveries per round")
    ap.add_argument("--rounds", type=int, default=5, help="best of N rounds per side")
    args = ap.parse_args()

    url = bench_database_url()
    setup_database(url)
    from tests.receivers import Receiver

    with Receiver([200]) as receiver:
        server_id, webhook_id, body = make_webhook(receiver.url)
        best_ours = best_ref = 0.0
        for _ in range(args.rounds):
            # Alternate sides so that machine noise hits both alike.
            insert_rows(server_id, webhook_id, body, args.rows)
            best_ref = max(best_ref, reference(url, receiver.url, args.rows))
            ids = insert_rows(server_id, webhook_id, body, args.rows)
            best_ours = max(best_ours, ours(ids))
        received = len(receiver.requests)
    assert received == 2 * args.rounds * args.rows, received
    print(f"webhook deliveries, {args.rows} rows x best of {args.rounds}, "
          f"{url.split('://')[0]}, body {len(body)} bytes, RSA-2048 signatures")
    print(TABLE_HEAD)
    print(row("webhook deliveries/s (signed, loopback receiver)", f"{best_ours:.0f}/s",
              f"{best_ref:.0f}/s", best_ours / best_ref, ">= 0.5"))


if __name__ == "__main__":
    main()
