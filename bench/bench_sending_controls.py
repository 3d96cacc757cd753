"""Sending controls, in one run on PostgreSQL:

1. The cost of an ``Idempotency-Key`` on a single send: POST /messages (1 recipient, real
   HTTP, a client in its own process on one keep-alive connection) with a fresh key on every
   request, against the same sends without the header; rounds alternate between the two so
   the machine's noise falls on both. Aim <= 1.2x. (A replay of a known key is printed too.)
2. Bulk release throughput: a server's N Held messages (Development mode, then back to Live)
   released by one bulk job through ``services/messages/bulk.process`` (chunks of BULK_CHUNK_SIZE, each
   a transaction with the job's cursor), measured as messages released per second. The
   queue is a no-op port, so the released messages' deliveries do not compete.

Run: .venv/bin/python bench/bench_sending_controls.py [--seconds 2] [--messages 10000]
     (BENCH_DATABASE_URL picks the database; its public schema is dropped and re-created)"""
from __future__ import annotations

import argparse
import os
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

def post_rate(base_url: str, path: str, payload: dict, key: str, *, seconds: float,
              key_prefix: str = "", repeat_key: bool = False) -> float:
    return http_post_rate(base_url, path, payload, {"X-Server-API-Key": key}, 201,
                          seconds=seconds, rounds=1, key_prefix=key_prefix,
                          repeat_key=repeat_key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each timed round")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of each arm (alternating)")
    ap.add_argument("--messages", type=int, default=10000, help="held messages to release")
    args = ap.parse_args()
    url = bench_database_url()
    prepare_database(url, **STACK_ENV)

    import logging

    logging.disable(logging.WARNING)
    from chalicelib.db import session_scope
    from chalicelib.db.models import Server
    from chalicelib.services.messages import bulk as bulk_actions
    from tests.support import Api

    stack, api, tenant = start_stack()
    try:
        key = tenant.api_key
        payload = {"from": f"Bench <app@{tenant.domain}>", "to": ["user@example.net"],
                   "subject": "Your receipt", "text_body": "Thanks for your order.\n" * 20}
        path = "/api/v2/server/messages"
        post_rate(stack.base_url, path, payload, key, seconds=0.5)  # warm both paths
        post_rate(stack.base_url, path, payload, key, seconds=0.5, key_prefix="warm")
        plain, keyed = [], []
        for round_ in range(args.rounds):
            plain.append(post_rate(stack.base_url, path, payload, key, seconds=args.seconds))
            keyed.append(post_rate(stack.base_url, path, payload, key, seconds=args.seconds,
                                   key_prefix=f"k{round_}-{time.time_ns()}"))
        replay = post_rate(stack.base_url, path, payload, key, seconds=args.seconds,
                           key_prefix=f"same-{time.time_ns()}", repeat_key=True)
        best_plain, best_keyed = max(plain), max(keyed)

        # Bulk release: N held messages (Development mode), released by one job.
        Api.data(api.patch(tenant.server_path, {"mode": "Development"}))
        per_request = 1000
        for start in range(0, args.messages, per_request):
            n = min(per_request, args.messages - start)
            Api.data(api.post("/api/v2/server/messages/batch", {"messages": [{
                "from": f"app@{tenant.domain}", "text_body": "x", "tag": "held",
                "to": [f"h{start + i}@example.net" for i in range(n)]}]}, server_key=key))
        Api.data(api.patch(tenant.server_path, {"mode": "Live"}))
        server_id = Api.data(api.get("/api/v2/server/", server_key=key))["server"]["id"]
        with session_scope() as db:
            job = bulk_actions.create(db, db.get(Server, server_id), "release",
                                      {"tag": "held"})["job"]
        started = time.perf_counter()
        outcome = bulk_actions.process(job["id"])
        elapsed = time.perf_counter() - started
        shown = Api.data(api.get(f"/api/v2/server/messages/bulk/{job['id']}",
                                 server_key=key))["job"]
        assert outcome == "done" and shown["done"] == args.messages, (outcome, shown)
    finally:
        stack.stop()

    print("Sending controls (PostgreSQL)\n")
    print(TABLE_HEAD)
    print(row("POST /messages with a fresh Idempotency-Key (sends/s; ratio = cost)",
              f"{best_keyed:.0f}/s", f"{best_plain:.0f}/s without the header",
              best_plain / best_keyed, "<= 1.2x"))
    print(row("replay of a known Idempotency-Key (answers/s)", f"{replay:.0f}/s",
              f"{best_plain:.0f}/s first sends", best_plain / replay, "(context)"))
    print(row(f"bulk release of {args.messages} held messages (messages/s)",
              f"{args.messages / elapsed:.0f}/s", f"{elapsed:.2f} s in total", 1.0,
              "(throughput)"))
    import statistics

    print(f"\nrounds (sends/s): without {[round(x) for x in plain]}, "
          f"with {[round(x) for x in keyed]}; ratio of the medians "
          f"{statistics.median(plain) / statistics.median(keyed):.2f}")


if __name__ == "__main__":
    main()
