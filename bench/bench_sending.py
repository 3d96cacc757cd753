"""Sending figures, in one run on PostgreSQL, each against a baseline measured alongside:

1. messages accepted per second through the send handler (real HTTP, POST /messages, sent
   by a client in its own process on one keep-alive connection) with 1 and with 50
   recipients per request, and through a 500-entry POST /messages/batch; the 1-recipient
   send also as Lambda runs it (the app called with an API Gateway proxy event, no local
   HTTP server); baseline: inserting the same rows (a submission with its raw source + one message row per
   recipient) with bare SQLAlchemy Core: single-row commits for the single send, a batched
   ``insert().returning()`` for the others. The handler also authenticates, validates every
   address, builds the MIME message, checks suppressions and resolves the stream.
2. deliveries per second from the worker (``services/delivery/process.process``: load, claim, DKIM,
   a fresh SMTP session, InFlight row, outcome + event + release in one transaction) to a
   loopback aiosmtpd sink; reference: a minimal loop that claims a row with SELECT ... FOR
   UPDATE SKIP LOCKED, signs with the same OpenSSL-backed DKIM signer, sends over ONE reused
   smtplib connection and commits.

Aims: send handler within 3x of its baseline, batch within 2x, worker >= 0.5 of reference.
Messages are text-only (tracking has nothing to rewrite on either side). The queue is
replaced by a no-op port during the send phases so no worker competes for the CPU.

Run: .venv/bin/python bench/bench_sending.py [--seconds 2] [--rows 200]
     (BENCH_DATABASE_URL picks the database; its public schema is dropped and re-created)"""
from __future__ import annotations

import argparse
import os
import smtplib
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import (  # noqa: E402
    STACK_ENV,
    TABLE_HEAD,
    bench_database_url,
    http_post_rate,
    prepare_database,
    row,
    start_stack,
)


def timed_rate(fn, count_per_call: int, seconds: float, rounds: int = 3) -> float:
    best = 0.0
    for _ in range(rounds):
        calls, started = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - started
            if elapsed >= seconds:
                break
        best = max(best, calls * count_per_call / elapsed)
    return best


def lambda_handler_call(path: str, payload: dict, key: str):
    """A call of the Chalice app as Lambda makes it behind API Gateway: the proxy event
    (built once by Chalice's own converter, as `chalice local` builds it) and a context, no
    HTTP server; what production runs for each request."""
    import json
    from types import SimpleNamespace

    from chalice.local import LambdaEventConverter, RouteMatcher

    from app import app

    body = json.dumps(payload).encode()
    event = LambdaEventConverter(RouteMatcher(list(app.routes))).create_lambda_event(
        method="POST", path=path, body=body,
        headers={"x-server-api-key": key, "content-type": "application/json",
                 "content-length": str(len(body)), "host": "localhost"})
    context = SimpleNamespace(aws_request_id="bench", function_name="api_handler",
                              memory_limit_in_mb=512, get_remaining_time_in_millis=lambda: 60000)

    def call():
        answer = app(dict(event), context)
        assert answer["statusCode"] == 201, answer
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each timed round")
    ap.add_argument("--rows", type=int, default=200, help="deliveries per worker round")
    ap.add_argument("--deliveries-only", action="store_true", help="skip the send phases")
    ap.add_argument("--profile", action="store_true",
                    help="print a cProfile of the worker's last round (slows it down)")
    args = ap.parse_args()
    url = bench_database_url()
    prepare_database(url, **STACK_ENV)

    import logging

    logging.disable(logging.WARNING)
    from sqlalchemy import create_engine, insert, text

    from chalicelib import clock
    from chalicelib.db.models import Message, Submission
    from chalicelib.services import content
    from chalicelib.services.dkim import signer as dkim_signing
    from chalicelib.services.delivery import process as worker
    from tests.mx import ScriptedMX

    stack, api, tenant = start_stack()
    sink = ScriptedMX().start()
    try:
        key = tenant.api_key

        def body(recipients: int, tag: str = "ours") -> dict:
            return {"from": f"Bench <app@{tenant.domain}>", "tag": tag,
                    "to": [f"user{i}@example.net" for i in range(recipients)],
                    "subject": "Your receipt", "text_body": "Thanks for your order.\n" * 20}

        def post(path: str, payload: dict, status: int) -> dict:
            response = api.http.post(stack.base_url + path, json=payload,
                                     headers={"X-Server-API-Key": key}, timeout=60)
            assert response.status_code == status, response.text[:300]
            return response.json()["data"]

        one, fifty = body(1), body(50)
        batch = {"messages": [body(1) for _ in range(500)]}
        sample = post("/api/v2/server/messages", one, 201)
        engine = create_engine(url)
        with engine.connect() as conn:
            info = conn.execute(text("SELECT server_id, domain_id, stream_id, mail_from FROM "
                                     "messages WHERE id = :id"),
                                {"id": sample["recipients"][0]["id"]}).one()
            key, legacy = conn.execute(text("SELECT content_key, raw FROM submissions "
                                            "WHERE id = :id"), {"id": sample["message_id"]}).one()
            raw = content.read(key, legacy)  # the source, from the content store

        def message_rows(sub_ids: list[int], per: int) -> list[dict]:
            now = clock.now()
            return [dict(server_id=info.server_id, submission_id=sid, token=os.urandom(12).hex(),
                         scope="outgoing", rcpt_to=f"user{i}@example.net",
                         mail_from=info.mail_from, subject="Your receipt", tag="base",
                         domain_id=info.domain_id, stream_id=info.stream_id, size=len(raw),
                         status="Pending", next_attempt_at=now, created_at=now, updated_at=now)
                    for sid in sub_ids for i in range(per)]

        def sub_rows(count: int) -> list[dict]:
            now = clock.now()
            return [dict(server_id=info.server_id, message_id_header="x@bench", size=len(raw),
                         raw=raw, created_at=now) for _ in range(count)]

        def baseline_single():
            with engine.begin() as conn:
                sid = conn.execute(insert(Submission).returning(Submission.id),
                                   sub_rows(1)[0]).scalar_one()
                conn.execute(insert(Message).returning(Message.id), message_rows([sid], 1)[0])

        def baseline_bulk(submissions: int, per: int):
            def run():
                with engine.begin() as conn:
                    sids = list(conn.execute(insert(Submission).returning(Submission.id),
                                             sub_rows(submissions)).scalars())
                    list(conn.execute(insert(Message).returning(Message.id),
                                      message_rows(sids, per)).scalars())
            return run

        def load(path: str, payload: dict, status: int):
            return lambda: http_post_rate(stack.base_url, path, payload,
                                          {"X-Server-API-Key": key}, status,
                                          seconds=args.seconds)

        figures = []
        for name, ours_rate, base_fn, per_call, aim in (
            ("send, 1 recipient/request", load("/api/v2/server/messages", one, 201),
             baseline_single, 1, "<= 3x"),
            ("send, 50 recipients/request", load("/api/v2/server/messages", fifty, 201),
             baseline_bulk(1, 50), 50, "<= 3x"),
            ("batch, 500 entries/request", load("/api/v2/server/messages/batch", batch, 200),
             baseline_bulk(500, 1), 500, "<= 2x"),
        ):
            if args.deliveries_only:
                continue
            base = timed_rate(base_fn, per_call, args.seconds)
            ours = ours_rate() * per_call
            figures.append(row(f"messages accepted/s, {name}", f"{ours:.0f}/s", f"{base:.0f}/s",
                               base / ours, f"slowdown {aim}"))
            if per_call == 1:  # the same send as Lambda runs it: no local HTTP server
                handler = lambda_handler_call("/api/v2/server/messages", one, key)
                ours = timed_rate(handler, 1, args.seconds)
                figures.append(row("messages accepted/s, send, 1 recipient, Lambda handler "
                                   "(API Gateway event)", f"{ours:.0f}/s", f"{base:.0f}/s",
                                   base / ours, f"slowdown {aim}"))

        # --- deliveries ---------------------------------------------------------------------
        os.environ["DELIVERY_RELAY"] = sink.relay
        with engine.begin() as conn:  # only the rows each side is about to deliver are due
            conn.execute(text("UPDATE messages SET status = 'Sent', next_attempt_at = NULL"))

        def make_due(tag: str, count: int) -> list[int]:
            ids = []
            for _ in range(count // 50):
                data = post("/api/v2/server/messages", body(50, tag), 201)
                ids += [r["id"] for r in data["recipients"]]
            return ids

        def reference(count: int) -> float:
            from chalicelib.db.models import Domain
            from chalicelib.db import session_scope
            from chalicelib.services.dkim import keys as dkim_keys

            with session_scope() as db:
                domain = db.get(Domain, info.domain_id)
                pem, selector, name = dkim_keys.private_key(domain.dkim_private_key_encrypted), domain.dkim_selector, domain.name
            host, port = sink.relay.split(":")
            smtp = smtplib.SMTP(host, int(port), local_hostname="mx.bench.test")
            done, started = 0, time.perf_counter()
            with engine.connect() as conn:
                while True:
                    with conn.begin():
                        found = conn.execute(text(
                            "SELECT m.id, m.token, m.rcpt_to, s.raw FROM messages m JOIN "
                            "submissions s ON s.id = m.submission_id WHERE m.status = 'Pending' "
                            "AND m.tag = 'ref' AND m.next_attempt_at <= :now ORDER BY m.id "
                            "LIMIT 1 FOR UPDATE OF m SKIP LOCKED"), {"now": clock.now()}).first()
                        if found is None:
                            break
                        signed = dkim_signing.sign_message(found.raw, domain=name,
                                                           selector=selector, private_pem=pem)
                        smtp.sendmail(f"{found.token}@rp.mx.bench.test", [found.rcpt_to], signed)
                        conn.execute(text("UPDATE messages SET status = 'Sent', "
                                          "next_attempt_at = NULL WHERE id = :id"), {"id": found.id})
                    done += 1
            elapsed = time.perf_counter() - started
            smtp.quit()
            assert done == count, (done, count)
            return done / elapsed

        def ours(ids: list[int]) -> float:
            started = time.perf_counter()
            for message_id in ids:
                outcome = worker.process(message_id)
                assert outcome == "Sent", outcome
            return len(ids) / (time.perf_counter() - started)

        best_ours = best_ref = 0.0
        for _ in range(3):
            make_due("ref", args.rows)
            best_ref = max(best_ref, reference(args.rows))
            best_ours = max(best_ours, ours(make_due("ours", args.rows)))
        if args.profile:
            import cProfile
            import pstats

            ids = make_due("ours", args.rows)
            profiler = cProfile.Profile()
            profiler.runcall(ours, ids)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(35)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
        assert len(sink.messages) == (7 if args.profile else 6) * args.rows
        figures.append(row("deliveries/s, worker vs reference loop (DKIM, loopback sink)",
                           f"{best_ours:.0f}/s", f"{best_ref:.0f}/s", best_ours / best_ref,
                           ">= 0.5"))
        engine.dispose()
    finally:
        sink.stop()
        stack.stop()
    print(f"sending, {url.split('://')[0]}, {len(raw)}-byte messages, best of 3 rounds of "
          f"{args.seconds:.0f}s (sends) / {args.rows} deliveries; send ratios are "
          "baseline rate / ours (slowdown), delivery ratio is ours / reference")
    print(TABLE_HEAD)
    for line in figures:
        print(line)


if __name__ == "__main__":
    main()
