"""Helpers for the reputation tests: a server's outcomes as the delivery worker counts them
(its hourly event counters), message rows for bounces and complaints to be counted against,
and the guard's counting as delivery and inbound call it."""
from __future__ import annotations

from collections import Counter

from chalicelib import clock, statuses
from chalicelib.db import counters
from chalicelib.db.models import Message
from chalicelib.services.reputation import guard
from tests.support import Api, all_tenants, unique


def server_id(api: Api, tenant) -> int:
    return Api.data(api.get(tenant.server_path))["server"]["id"]


def outcomes(sid: int, delivered: int, failed: int = 0, at=None) -> None:
    """``delivered`` MessageSent and ``failed`` MessageDeliveryFailed outcomes of the server,
    counted as every outcome counts them (db/counters.event_inserted)."""
    at = at or clock.now()
    deltas: Counter = Counter()
    for name, n in (("MessageSent", delivered), ("MessageDeliveryFailed", failed)):
        for _ in range(n):
            counters.event_inserted(sid, name, at, deltas)
    with all_tenants() as db:
        counters.apply(db.connection(), deltas)


def messages(sid: int, n: int) -> list[int]:
    """``n`` outgoing messages of the server, sent."""
    with all_tenants() as db:
        rows = [Message(server_id=sid, token=unique("m").replace("-", "")[:32],
                        rcpt_to=f"{unique('r')}@recipient.example",
                        mail_from="app@sender.example", scope="outgoing",
                        status=statuses.SENT) for _ in range(n)]
        db.add_all(rows)
        db.flush()
        return [m.id for m in rows]


def count(sid: int, message_id: int, kind: str = guard.BOUNCE) -> bool:
    with all_tenants() as db:
        return guard.count(db, sid, message_id, kind, "no_such_user"
                           if kind == guard.BOUNCE else None)


def reputation(api: Api, tenant) -> dict:
    return Api.data(api.get(tenant.server_path + "/reputation"))["reputation"]


def server(api: Api, tenant) -> dict:
    return Api.data(api.get(tenant.server_path))["server"]
