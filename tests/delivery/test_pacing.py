"""Per-destination pacing (issue 24, item 4): a receiver that throttles after N messages is
paced, not hammered; the backoff, the connection slots and the rate are shared through the
database by every worker; a paced message is released (not dropped), stays Pending with the
reason shown and burns no attempt.

The tests deliver by hand (``worker.process`` / ``process_batch``; every wake-up is dropped so
the stack's own workers never race them) and move the service's clock instead of waiting:
they count what the receiving MX saw (connections, recipients offered, throttle replies it
had to give), never time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from chalicelib import clock, queues
from chalicelib.db import session_scope
from chalicelib.db.models import DeliveryDestination, DeliveryLease, Message
from chalicelib.services.delivery import pacing, process as worker, client
from tests.support.delivery import DroppedQueue
from tests.support.delivery import message_row, park_due
from tests.support.sending import message
from tests.support import Api, all_tenants, make_tenant, unique


@pytest.fixture
def by_hand(monkeypatch, mx):
    """Real backoffs (TIME_SCALE 1; the test moves the clock), and only the test's own calls
    deliver."""
    monkeypatch.setenv("TIME_SCALE", "1")
    monkeypatch.setattr(queues, "_port", DroppedQueue())
    return mx


def _destination(name: str) -> DeliveryDestination:
    with session_scope() as session:
        row = session.scalars(select(DeliveryDestination)
                              .where(DeliveryDestination.destination == name)).one()
        session.expunge(row)
        return row


def _rules(monkeypatch, *rules: dict) -> None:
    monkeypatch.setenv("DELIVERY_PACING_RULES", json.dumps(list(rules)))


def test_a_throttling_receiver_is_paced_not_hammered(api, tenant, by_hand, db):
    mx, domain = by_hand, f"{unique('paced')}.example"
    mx.throttle_after(3)
    ids = park_due(db, api, tenant, domain, 8)
    with all_tenants() as session:  # one was scheduled (send_at): paced, it is Pending
        session.execute(update(Message).where(Message.id == ids[-1]).values(status="Scheduled"))

    results = worker.process_batch(ids)
    assert [results[i] for i in ids] == ["Sent"] * 3 + ["SoftFail"] + ["paced"] * 4
    assert (len(mx.messages), mx.throttled, mx.connections) == (3, 1, 1)
    throttled = message(api, tenant, ids[3])
    assert throttled["status"] == "SoftFail" and throttled["attempts"] == 1
    assert [d["code"] for d in throttled["deliveries"]] == [421]
    for message_id in ids[4:]:
        shown = message(api, tenant, message_id)
        assert shown["status"] == "Pending"
        assert "answered a throttle reply (421 4.7.0 Try again later" in shown["status_details"]
        assert shown["status_details"].endswith("(pacing)")
        # Released, not dropped: due again after the backoff, no attempt, no event.
        assert shown["next_attempt_at"] > throttled["last_attempt_at"]
        assert (shown["attempts"], shown["deliveries"], shown["events"]) == (0, [], [])
        assert message_row(message_id).locked_by is None
    backoff = _destination(domain)
    assert backoff.throttles == 1 and backoff.backoff_reason.startswith("421 4.7.0")

    # Every worker sees the backoff: a new message, and the waiting ones woken again early,
    # connect to nobody.
    [fresh] = park_due(db, api, tenant, domain, 1)
    assert worker.process(fresh) == "paced"
    assert set(worker.process_batch(ids[3:]).values()) == {"early"}
    assert (mx.throttled, mx.connections) == (1, 1)

    # The backoff is over but the receiver still throttles: ONE attempt finds that out, the
    # backoff doubles, the rest wait again.
    waiting = ids[3:] + [fresh]
    clock.advance(timedelta(seconds=70))
    results = worker.process_batch(waiting)
    assert results[ids[3]] == "SoftFail"
    assert [results[i] for i in waiting[1:]] == ["paced"] * 5
    assert (mx.throttled, mx.connections) == (2, 2)
    assert _destination(domain).throttles == 2

    # The receiver recovers: after the (longer) backoff everything goes, each message once.
    mx.stop_throttling()
    clock.advance(timedelta(seconds=130))
    assert set(worker.process_batch(waiting).values()) == {"Sent"}
    shown = [message(api, tenant, i) for i in ids + [fresh]]
    assert all(m["status"] == "Sent" for m in shown)
    assert [m["attempts"] for m in shown] == [1, 1, 1, 3, 1, 1, 1, 1, 1]
    assert sorted(len(mx.received_for(m["rcpt_to"])) for m in shown) == [1] * 9
    assert (mx.throttled, mx.connections) == (2, 3)
    assert _destination(domain).throttles == 0  # a delivery ends the row of throttles


def test_single_wakeups_share_the_backoff_and_greylisting_is_no_throttle(api, tenant, by_hand,
                                                                         db):
    mx = by_hand
    slow, grey = f"{unique('slow')}.example", f"{unique('grey')}.example"
    # A 4.7.x deferral at DATA ("rate limited") from one destination...
    mx.script = ["451 4.7.1 Rate limited, slow down"]
    first, second = park_due(db, api, tenant, slow, 2)
    assert worker.process(first) == "SoftFail"
    assert worker.process(second) == "paced"
    assert "451 4.7.1 Rate limited" in message(api, tenant, second)["status_details"]
    assert mx.connections == 1
    # ... while a greylisting reply is about one sender and recipient: no backoff.
    mx.script = ["451 4.7.1 Greylisted, please try again in 5 minutes"]
    third, fourth = park_due(db, api, tenant, grey, 2)
    assert worker.process(third) == "SoftFail"
    assert worker.process(fourth) == "Sent"
    assert _destination(grey).backoff_until is None


def test_domains_hosted_together_are_one_destination_found_by_their_mx(
        api, tenant, by_hand, db, dns_zone, monkeypatch):
    """Two recipient domains whose MX hosts are under one provider's name (as every Google
    Workspace domain's are under google.com): a throttle while delivering to one paces the
    other. Delivered to the MX hosts (no relay), on the test MX's port."""
    mx, name = by_hand, unique("host")
    provider = f"{name}.example"
    _rules(monkeypatch, {"name": name, "mx": [provider]})
    monkeypatch.delenv("DELIVERY_RELAY", raising=False)
    monkeypatch.setenv("DELIVERY_MX_PORT", str(mx.port))
    shop, bakery = f"{unique('shop')}.example", f"{unique('bakery')}.example"
    for domain in (shop, bakery):
        dns_zone.zone[(f"{domain}.", "MX")] = [(10, f"mx1.{provider}.")]
    dns_zone.zone[(f"mx1.{provider}.", "A")] = ["127.0.0.1"]
    mx.script = ["421 4.7.0 Try again later, closing connection."]
    [to_shop] = park_due(db, api, tenant, shop, 1)
    [to_bakery] = park_due(db, api, tenant, bakery, 1)
    assert worker.process(to_shop) == "SoftFail"
    assert worker.process(to_bakery) == "paced"
    assert mx.connections == 1
    assert f"waiting: {name} answered a throttle reply" in \
        message(api, tenant, to_bakery)["status_details"]
    assert _destination(name).throttles == 1


def test_a_destination_takes_only_its_connections_across_workers(api, tenant, by_hand, db,
                                                                 monkeypatch):
    mx, domain, name = by_hand, f"{unique('solo')}.example", unique("solo")
    _rules(monkeypatch, {"name": name, "domains": [domain], "connections": 1})
    monkeypatch.setenv("DELIVERY_SESSION_IDLE_SECONDS", "60")
    first, second = park_due(db, api, tenant, domain, 2)
    arrived, release = mx.hold_next_data()
    outcomes: list[str] = []
    busy = threading.Thread(target=lambda: outcomes.append(worker.process(first)))
    busy.start()
    try:
        assert arrived.wait(20)  # the first worker holds the only slot, in DATA
        assert _destination(name).active == 1
        # A worker of another process: no second connection. (Another run of this process
        # is handed the message instead: test_handoff.py.)
        assert _in_another_process(second) == "paced"
        assert f"all 1 connections to {name}" in message(api, tenant, second)["status_details"]
        assert mx.connections == 1
    finally:
        release.set()
        busy.join(30)
    assert outcomes == ["Sent"]
    # The worker is done: its session stays open, idle, and keeps the slot (sessions.py).
    assert _destination(name).active == 1
    clock.advance(timedelta(seconds=30))
    assert worker.process(second) == "Sent"  # over that session, on that slot
    assert len(mx.messages) == 2 and mx.connections == 1
    pacing.release_idle(everything=True)  # closed: the slot is given back
    assert _destination(name).active == 0


_OTHER_PROCESS = """
import sys
from chalicelib.services.delivery import process
print(process.process(int(sys.argv[1])), flush=True)
"""


def _in_another_process(message_id: int) -> str:
    """One wake-up handled by a worker process of its own (same database, settings, MX)."""
    done = subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(message_id)],
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_dead_workers_slot_is_given_back_when_its_lease_lapses(api, tenant, by_hand, db,
                                                                 monkeypatch):
    mx, domain, name = by_hand, f"{unique('dead')}.example", unique("dead")
    _rules(monkeypatch, {"name": name, "domains": [domain], "connections": 1})
    [first] = park_due(db, api, tenant, domain, 1)
    pool = _pool_of(first)
    now = clock.now()
    with session_scope() as session:  # a worker took the only slot and died
        session.add(DeliveryDestination(ip_pool_id=pool, destination=name, active=1,
                                        updated_at=now))
        session.add(DeliveryLease(ip_pool_id=pool, destination=name, holder="dead-worker",
                                  expires_at=now + timedelta(seconds=960)))
    assert worker.process(first) == "paced"  # its lease still runs
    assert mx.connections == 0
    clock.advance(timedelta(seconds=961))  # CLAIM_TIMEOUT_SECONDS later it has lapsed
    assert worker.process(first) == "Sent"
    assert _destination(name).active == 0
    with session_scope() as session:
        assert session.scalars(select(DeliveryLease)
                               .where(DeliveryLease.destination == name)).all() == []


def _pool_of(message_id: int) -> int:
    """The pool the claim reads for the message (its server's, the default, or 0)."""
    from chalicelib.db.models import IPPool, Server

    with all_tenants() as session:
        server = session.get(Server, session.get(Message, message_id).server_id)
        default = session.scalar(select(IPPool.id).where(IPPool.is_default.is_(True))
                                 .order_by(IPPool.id).limit(1))
        return server.ip_pool_id or default or 0


def test_messages_a_minute_come_back_one_by_one(api, tenant, by_hand, db, monkeypatch):
    mx, domain, name = by_hand, f"{unique('rate')}.example", unique("rate")
    _rules(monkeypatch, {"name": name, "domains": [domain], "per_minute": 6})  # one per 10 s
    ids = park_due(db, api, tenant, domain, 3)
    results = worker.process_batch(ids)
    assert [results[i] for i in ids] == ["Sent", "paced", "paced"]
    assert len(mx.rcpts_seen) == 1
    assert "at most 6 messages a minute" in message(api, tenant, ids[1])["status_details"]
    # Each waiting message was handed its own wake-up time, one interval apart.
    gap = message_row(ids[2]).next_attempt_at - message_row(ids[1]).next_attempt_at
    assert timedelta(seconds=9.9) < gap < timedelta(seconds=10.1)

    clock.advance(timedelta(seconds=11))
    results = worker.process_batch(ids[1:])
    assert (results[ids[1]], results[ids[2]]) == ("Sent", "early")
    clock.advance(timedelta(seconds=10))
    assert worker.process(ids[2]) == "Sent"
    assert len(mx.rcpts_seen) == 3 and len(mx.messages) == 3
    assert [message_row(i).attempts for i in ids] == [1, 1, 1]


def test_each_ip_pool_is_paced_on_its_own(api, by_hand, db):
    mx, domain = by_hand, f"{unique('pools')}.example"
    tenants = []
    for address in ("127.0.0.2", "127.0.0.3"):  # each pool sends from its own address
        tenant = make_tenant(api)
        pool = Api.data(api.post("/api/v2/admin/ip_pools", {"name": unique("pool")}),
                        201)["ip_pool"]
        Api.data(api.post(f"/api/v2/admin/ip_pools/{pool['id']}/ip_addresses",
                          {"ipv4": address, "hostname": f"{unique('mta')}.pool.example"}), 201)
        Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/servers/{tenant.server}"
                          "/ip_pool", {"ip_pool_id": pool["id"]}))
        tenants.append((tenant, pool))
    (a, pool_a), (b, _) = tenants
    mx.script = ["421 4.7.0 Too many messages from your address"]
    first_a, second_a = park_due(db, api, a, domain, 2)
    [first_b] = park_due(db, api, b, domain, 1)
    assert worker.process(first_a) == "SoftFail"  # pool A's address is throttled ...
    assert worker.process(first_b) == "Sent"  # ... pool B's is not
    assert worker.process(second_a) == "paced"
    assert [m.peer for m in mx.messages] == ["127.0.0.3"]
    assert f"{domain} (IP pool {pool_a['id']})" in message(api, a, second_a)["status_details"]


def test_destinations_rules_and_what_a_throttle_is(monkeypatch):
    google, rule = pacing.destination("GMail.com", [])
    assert (google, rule.connections, rule.per_minute) == ("google", 20, 600)
    # Any domain Google hosts is the same destination, found by its MX hosts.
    assert pacing.destination("shop.example", [("alt1.aspmx.l.google.com", 25)])[0] == "google"
    assert pacing.destination("hotmail.co.uk", [("eur.olc.protection.outlook.com", 25)]
                              )[0] == "microsoft"
    monkeypatch.setenv("DELIVERY_PACING_CONNECTIONS", "7")
    other, rule = pacing.destination("corp.example", [("mx.corp.example", 25)])
    assert (other, rule.connections, rule.per_minute) == ("corp.example", 7, 0)
    # Operators replace a built-in rule's fields by its name, and add their own.
    _rules(monkeypatch, {"name": "yahoo", "per_minute": 100},
           {"name": "corp", "domains": ["corp.example"], "connections": 2})
    yahoo = pacing.destination("aol.com", [])[1]
    assert (yahoo.name, yahoo.connections, yahoo.per_minute) == ("yahoo", 10, 100)
    assert pacing.destination("corp.example", [])[1].connections == 2

    def reply(code, text, status=client.SOFT):
        return client.Outcome(status, "", code=code, output=text)

    assert pacing.is_throttle(reply(421, "4.3.2 Service shutting down"))
    assert pacing.is_throttle(reply(421, "4.7.28 Unusual rate of unsolicited mail"))
    assert pacing.is_throttle(reply(451, "4.7.500 Server busy. Please try again later"))
    assert not pacing.is_throttle(reply(451, "4.7.1 Greylisted, try again in 5 minutes"))
    assert not pacing.is_throttle(reply(452, "4.2.2 Mailbox full"))
    assert not pacing.is_throttle(reply(550, "5.7.1 Rejected", client.HARD))
    assert not pacing.is_throttle(client.Outcome(client.SOFT, "refused", code=None))


def test_retention_forgets_destinations_idle_for_a_day(database):
    from chalicelib.services.messages import retention

    now, old = clock.now(), clock.now() - timedelta(days=2)
    names = {kind: f"{unique(kind)}.example" for kind in ("idle", "busy", "backing", "recent")}
    with session_scope() as session:
        for kind, name in names.items():
            session.add(DeliveryDestination(
                ip_pool_id=0, destination=name, updated_at=now if kind == "recent" else old,
                active=1 if kind == "busy" else 0,
                backoff_until=now + timedelta(minutes=5) if kind == "backing" else None))
    with session_scope() as session:
        assert retention.prune(session)["delivery_destinations"] >= 1
    with session_scope() as session:
        left = set(session.scalars(select(DeliveryDestination.destination).where(
            DeliveryDestination.destination.in_(names.values()))))
    assert left == {names["busy"], names["backing"], names["recent"]}


def _pacing_statements(run) -> list[str]:
    """The statements of their own that touch pacing's table while ``run()`` runs: not the
    in-flight marker's write, which carries a held slot's admission (PostgreSQL: the marker's
    one statement, ``WITH admit ...``; SQLite: the admission's UPDATE followed, in the same
    thread and transaction, by the marker's INSERT)."""
    from sqlalchemy import event

    from chalicelib.db.engine import autocommit_engine, get_engine

    seen: list[tuple[int, str]] = []  # (thread, statement), every statement

    def note(_conn, _cursor, statement, *_):
        seen.append((threading.get_ident(), statement))

    traced: list = []

    def trace(dbapi_connection, _record, _proxy):
        # SQLite: the delivery writes run on the DBAPI cursor (writes.sqlite_transaction),
        # unseen by SQLAlchemy's events; the connection's own trace sees every statement.
        traced.append(dbapi_connection)
        dbapi_connection.set_trace_callback(
            lambda statement: seen.append((threading.get_ident(), statement)))

    engines = [e for e in (get_engine(), autocommit_engine()) if e is not None]
    sqlite = engines[0].dialect.name == "sqlite"
    for engine in engines:
        if sqlite:
            event.listen(engine, "checkout", trace)
        else:
            event.listen(engine, "before_cursor_execute", note)
    try:
        run()
    finally:
        for engine in engines:
            if sqlite:
                event.remove(engine, "checkout", trace)
            else:
                event.remove(engine, "before_cursor_execute", note)
        for dbapi_connection in traced:
            dbapi_connection.set_trace_callback(None)
    own = []
    for i, (thread, statement) in enumerate(seen):
        if "delivery_destinations" not in statement or statement.startswith(
                ("WITH admit", "INSERT INTO message_raws", "INSERT INTO deliveries")):
            continue  # not pacing's, or the marker (conditional on the admission)
        following = next((s for t, s in seen[i + 1:] if t == thread), "")
        if statement.startswith("UPDATE delivery_destinations SET updated_at") and \
                following.startswith(("INSERT INTO message_raws", "INSERT INTO deliveries")):
            continue  # SQLite: the marker's transaction begins with its admission
        own.append(statement)
    return own


def test_a_held_slots_messages_are_admitted_by_their_markers(api, tenant, by_hand, db):
    """A batch to one destination takes its slot once and gives it back once: the messages
    after the first are admitted in their in-flight marker's write (no statement, no commit
    of their own), which pacing had added to every message."""
    mx, domain = by_hand, f"{unique('held')}.example"
    [first] = park_due(db, api, tenant, domain, 1)
    assert worker.process(first) == "Sent"  # the destination's row exists from now on
    ids = park_due(db, api, tenant, domain, 4)
    results: dict = {}
    statements = _pacing_statements(lambda: results.update(worker.process_batch(ids)))
    assert results == {i: "Sent" for i in ids}
    assert len(statements) == 2, statements  # take the slot, give it back
    assert len(mx.messages) == 5
    assert _destination(domain).active == 0


def test_another_workers_backoff_stops_a_held_session_before_data(api, tenant, by_hand, db):
    """A backoff that another worker's throttle reply starts while this worker holds the
    destination's slot stops its next message at the marker: no DATA, no marker, paced with
    the reason; the one after asks before connecting and connects to nobody."""
    mx, domain = by_hand, f"{unique('stop')}.example"
    ids = park_due(db, api, tenant, domain, 3)
    arrived, release = mx.hold_next_data()
    results: dict = {}
    busy = threading.Thread(target=lambda: results.update(worker.process_batch(ids)))
    busy.start()
    try:
        assert arrived.wait(20)  # the first message is in DATA, the slot is held
        with session_scope() as session:  # what another worker's 421 writes
            session.execute(update(DeliveryDestination)
                            .where(DeliveryDestination.destination == domain)
                            .values(backoff_until=clock.now() + timedelta(seconds=60),
                                    backoff_reason="421 4.7.0 elsewhere", throttles=1))
    finally:
        release.set()
        busy.join(30)
    assert [results[i] for i in ids] == ["Sent", "paced", "paced"]
    assert (len(mx.messages), mx.connections) == (1, 1)
    assert len(mx.rcpts_seen) == 2  # the second's envelope went over the open session only
    for message_id in ids[1:]:
        shown = message(api, tenant, message_id)
        assert "answered a throttle reply (421 4.7.0 elsewhere)" in shown["status_details"]
        assert (shown["status"], shown["attempts"], shown["deliveries"]) == ("Pending", 0, [])
    assert _destination(domain).active == 0


def test_an_adopted_slots_first_message_is_admitted_by_its_marker(api, tenant, by_hand, db,
                                                                  monkeypatch):
    """A run that adopts the slot a run before it parked with its session, after a message
    sent there, admits its first message in that message's marker, as the later messages of
    a run are: no statement of its own, no new connection."""
    monkeypatch.setenv("DELIVERY_SESSION_IDLE_SECONDS", "30")  # idle sessions stay open
    mx, domain = by_hand, f"{unique('adopt')}.example"
    try:
        [first] = park_due(db, api, tenant, domain, 1)
        assert worker.process(first) == "Sent"  # parked with its slot and session
        [second] = park_due(db, api, tenant, domain, 1)
        results: dict = {}
        statements = _pacing_statements(lambda: results.update({second: worker.process(second)}))
        assert results == {second: "Sent"}
        assert statements == []
        assert (len(mx.messages), mx.connections) == (2, 1)
    finally:
        pacing.release_idle(everything=True)
    assert _destination(domain).active == 0


def test_a_backoff_begun_while_a_slot_was_parked_stops_its_adopter_before_data(
        api, tenant, by_hand, db, monkeypatch):
    """Another worker's throttle reply while the slot was parked: the adopting run's message
    is stopped at its marker (its envelope went over the idle session; no DATA, no marker),
    paced with the reason, its slot given back (its session left in DATA is closed)."""
    monkeypatch.setenv("DELIVERY_SESSION_IDLE_SECONDS", "30")
    mx, domain = by_hand, f"{unique('adoptstop')}.example"
    try:
        [first] = park_due(db, api, tenant, domain, 1)
        assert worker.process(first) == "Sent"
        with session_scope() as session:  # what another worker's 421 writes
            session.execute(update(DeliveryDestination)
                            .where(DeliveryDestination.destination == domain)
                            .values(backoff_until=clock.now() + timedelta(seconds=60),
                                    backoff_reason="421 4.7.0 elsewhere", throttles=1))
        [second] = park_due(db, api, tenant, domain, 1)
        assert worker.process(second) == "paced"
        assert (len(mx.messages), mx.connections, len(mx.rcpts_seen)) == (1, 1, 2)
        shown = message(api, tenant, second)
        assert "answered a throttle reply (421 4.7.0 elsewhere)" in shown["status_details"]
        assert (shown["status"], shown["attempts"], shown["deliveries"]) == ("Pending", 0, [])
    finally:
        pacing.release_idle(everything=True)
    assert _destination(domain).active == 0
