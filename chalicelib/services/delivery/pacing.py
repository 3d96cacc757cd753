"""Per-destination pacing: how fast, and how many at once, every worker together delivers to
one receiving mail system, and the backoff all of them keep after it answered "slow down".
(Past 500 lines on purpose: each check is one statement, and the policy reads best next to
the SQL that makes it atomic; a fifth of the file is this description.)

A **destination** is what receivers throttle: the recipient domain, or a group of domains
one provider hosts (a rule: ``google`` covers gmail.com, googlemail.com and every domain whose
MX hosts are under google.com), as seen from one IP pool (receivers count per sending
address; a tenant in a dedicated pool is not slowed by the shared pool's throttling). Its
state is one row of ``delivery_destinations``, shared through the database, so every worker
(Lambda invocations included) agrees:

* **Connections.** At most ``connections`` workers deliver to it at once: a worker takes a
  slot (``active`` + 1, with a ``delivery_leases`` row that lapses after
  CLAIM_TIMEOUT_SECONDS, so a worker that dies gives its slot back when the destination runs
  out) before connecting, and keeps it for the consecutive messages of a batch to that
  destination (they share one SMTP session). When the worker is done with the destination
  its session stays open, idle, and keeps the slot (``sessions.py``: parked, adopted by the
  process's next run there without a statement; closed and the slot given back after
  DELIVERY_SESSION_IDLE_SECONDS, or at once when a run of the process finds no free slot),
  so the limit counts idle sessions too.
* **Messages a minute.** ``per_minute`` (0: none), as the generic cell rate algorithm: a
  message may go when the destination's theoretical arrival time is at most a tolerance
  ahead of now (a burst of 10 seconds' worth), and moves it on by 60/per_minute seconds.
* **Backoff.** A throttle reply (421, or a 4xx with an enhanced status 4.7.x, which is how
  Gmail, Yahoo and Microsoft say "too fast"; a reply that says greylisting is not one: it is
  about one sender-recipient pair) puts the destination into backoff for
  DELIVERY_PACING_BACKOFF_SECONDS, doubled per further throttle in a row up to
  DELIVERY_PACING_BACKOFF_MAX_SECONDS; a delivery ends the row of throttles.

Each check and its update is ONE conditional UPDATE (one statement on PostgreSQL, with the
slot's lease chained as a CTE): atomic, so two workers never take the last slot or the same
rate cell. A message that may not go now is **paced**, not attempted: its claim is released
with ``next_attempt_at`` at the time it may go and the reason in ``status_details``; its
status stays (Pending stays Pending; a Scheduled one becomes Pending), no attempt is counted,
no event fires (``attempt.pace``). Messages waiting on a backoff or a rate come back one by
one: each is handed the next wake-up time (``wake_at``, spaced at the rate, or at
``connections`` a second without one) instead of all waking at once when the backoff ends.
Waiting messages are not strictly first come, first served: a new message may take a free
slot before a waiting one wakes.

**Handed over, not paced.** A message finding every slot taken while a run of this same
process holds one of them in use is not paced: it is handed to that run (``handoff.py``),
which carries it over its session between and after its own messages (``Pacer.carry``), the
message admitted by the destination's other limits (rate, backoff) on the holder's slot. Only
when no run of this process holds a slot there is it paced as above. A `make run` worker
process hands over as soon as it holds its share of the slots (``_Limits.share``: the
connections over WORKER_PROCESSES, rounded up), leaving the others to the other processes.

**At the marker.** The later messages of a batch to a destination without a
rate whose slot the worker already holds, over the session the previous message left open
(it was delivered or refused for good), and likewise the first message of a run that adopts
a slot parked after such a message (``sessions.Slot.throttles``: the destination's throttles
as the parking run last saw them), are admitted in the statement that writes their
in-flight marker, right before DATA (``Admission``): the same conditional UPDATE (no backoff
now) as a CTE of that statement on PostgreSQL, the marker written only if it matched (on
SQLite the UPDATE and the marker's conditional INSERTs in the marker's one transaction). So
their admission costs no commit of its own (pacing had doubled the commits per message),
and is still decided before anything of the message can be accepted. When it does not match
(another worker's throttle reply started a backoff meanwhile) the session is left without
DATA (RSET before its next use), the message is paced as above and the slot given back, so
the batch's next message for the destination asks again before connecting. The cost: such a
message's MAIL and RCPT went over the open session during a backoff (nothing is
delivered; no connection is opened, unless an adopted idle session turns out closed by the
server and is replaced). The first message of a destination, one after a deferral,
a throttle or a broken session, and every message to a destination with a rate are admitted
before connecting, by a statement of their own.

Every duration here is a scheduled delay and follows TIME_SCALE. Limits come from
``rules()``: the built-in rules for the large providers, DELIVERY_PACING_RULES over them, and
DELIVERY_PACING_CONNECTIONS / DELIVERY_PACING_PER_MINUTE for any other destination.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import DateTime, Float, Integer, String, and_, bindparam, case, delete, exists
from sqlalchemy import func, insert, or_, select, tuple_, update

from chalicelib import clock, observability, statuses
from chalicelib.config import get_settings
from chalicelib.db import session_scope
from chalicelib.db.engine import autocommit_engine
from chalicelib.db.models import DeliveryDestination, DeliveryLease
from chalicelib.db import tenancy
from chalicelib.services.delivery import handoff, sessions, client, writes
from chalicelib.services.failures import enhanced_status
from chalicelib.services.failures.rules import GREYLISTING

log = logging.getLogger(__name__)

D, L = DeliveryDestination.__table__, DeliveryLease.__table__
EPOCH = datetime(1970, 1, 1)
BURST_SECONDS = 10.0      # a destination may take this long's worth of its rate at once
SLOT_WAIT_SECONDS = 3.0  # a message finding every connection in use tries again after ~this
LINE_SECONDS = 3600.0     # wake-up times are handed at most this far ahead
# A time further ahead than it could have been set (by this much more than the longest
# backoff, or than a rate cell) was set under another clock (a host's clock stepped back, or
# a test's): it is ignored. The allowance covers the skew between workers' clocks.
CLOCK_SKEW_SECONDS = 5.0


@dataclass(frozen=True)
class Rule:
    name: str
    domains: tuple[str, ...]  # recipient domains it covers
    mx: tuple[str, ...]       # MX host names it covers (the name or anything under it)
    connections: int
    per_minute: int           # 0: no limit


# Starting points for a sending address without a reputation yet; none of these providers
# publishes figures, and each throttles on its own (which the backoff follows). Raise them
# (DELIVERY_PACING_RULES) as your addresses earn it.
BUILT_IN = (
    Rule("google", ("gmail.com", "googlemail.com"), ("google.com", "googlemail.com"), 20, 600),
    Rule("microsoft", ("outlook.com", "hotmail.com", "live.com", "msn.com"),
         ("protection.outlook.com",), 20, 600),
    Rule("yahoo", ("yahoo.com", "ymail.com", "rocketmail.com", "aol.com"), ("yahoodns.net",),
         10, 300),
    Rule("apple", ("icloud.com", "me.com", "mac.com"), ("mail.icloud.com",), 10, 300),
)


@functools.lru_cache(maxsize=8)
def _rules(configured: str, connections: int, per_minute: int) -> tuple[Rule, ...]:
    built_in = {rule.name: rule for rule in BUILT_IN}
    ours = []
    for entry in json.loads(configured) if configured else []:
        base = built_in.pop(entry["name"], None)

        def field(name, default):
            return entry[name] if name in entry else getattr(base, name, default)

        ours.append(Rule(entry["name"],
                         tuple(d.lower().rstrip(".") for d in field("domains", ())),
                         tuple(m.lower().strip(".") for m in field("mx", ())),
                         field("connections", connections), field("per_minute", per_minute)))
    return tuple(ours) + tuple(built_in.values())


def rules() -> tuple[Rule, ...]:
    """DELIVERY_PACING_RULES first (one named like a built-in rule replaces the fields it
    gives), then the built-in rules left."""
    settings = get_settings()
    return _rules(settings.delivery_pacing_rules, settings.delivery_pacing_connections,
                  settings.delivery_pacing_per_minute)


def destination(domain: str, mx_hosts: list[tuple[str, int]]) -> tuple[str, Rule]:
    """(destination name, its rule) for mail to ``domain`` whose MX hosts are ``mx_hosts``
    (none known when the mail goes through a relay: then only the domain counts)."""
    domain = domain.lower().rstrip(".")
    names = [h.lower().rstrip(".") for h, _ in mx_hosts]
    for rule in rules():
        if domain in rule.domains or any(name == mx or name.endswith("." + mx)
                                         for name in names for mx in rule.mx):
            return rule.name, rule
    settings = get_settings()
    return domain, Rule(domain, (domain,), (), settings.delivery_pacing_connections,
                        settings.delivery_pacing_per_minute)


def share(domain: str) -> int:
    """The slots one worker process takes at ``domain`` before it hands its messages to its
    own runs there (``_Limits.share``), by the rule naming the domain (a rule found by MX
    hosts is not known before the lookup: the default limit's share then)."""
    return _Limits(destination(domain, [])[1]).share


def is_throttle(outcome: client.Outcome) -> bool:
    """A reply saying "too fast, try later": 421, or a 4xx whose enhanced status is 4.7.x."""
    if outcome.status != client.SOFT or outcome.code is None:
        return False
    text = outcome.output or ""
    if GREYLISTING.search(text):  # the words of failures' "greylisted" rule
        return False
    return outcome.code == 421 or (400 <= outcome.code < 500
                                   and (enhanced_status(text) or "").startswith("4.7."))


@dataclass
class Wait:
    """A message may not go now: when it may, and why (its ``status_details``)."""
    until: datetime
    reason: str
    destination: str
    busy: bool = False  # every connection slot is taken
    line: tuple | None = None  # ...one by a run of this process: hand the message to it


def _ts(moment: datetime) -> float:
    return (moment - EPOCH).total_seconds()


def _moment(ts: float) -> datetime:
    return EPOCH + timedelta(seconds=ts)


def _iso(moment: datetime) -> str:
    return moment.replace(microsecond=0).isoformat() + "Z"


def _label(pool: int, name: str) -> str:
    return f"{name} (IP pool {pool})" if pool else name


class _Limits:
    """A rule's limits in seconds after TIME_SCALE."""

    def __init__(self, rule: Rule):
        settings = get_settings()
        self.rule = rule
        self.interval = settings.scaled(60.0 / rule.per_minute) if rule.per_minute else 0.0
        burst = max(1, int(rule.per_minute * BURST_SECONDS / 60)) if rule.per_minute else 1
        self.tolerance = self.interval * (burst - 1)
        # Waiting messages wake at the rate; without one, at ``connections`` a second.
        self.spacing = self.interval or settings.scaled(1.0 / rule.connections)
        self.backoff_max = settings.scaled(settings.delivery_pacing_backoff_max_seconds)
        self.backoff_base = settings.scaled(settings.delivery_pacing_backoff_seconds)
        self.lease = settings.claim_timeout_seconds
        # The slots one worker process takes before it hands its messages to its own
        # holders (handoff.py): its share among `make run`'s WORKER_PROCESSES (all of them
        # with 0 or 1, and on Lambda, whose concurrent invocations nobody counts here).
        processes = 1 if os.environ.get("AWS_LAMBDA_FUNCTION_NAME") else \
            max(1, settings.worker_processes)
        self.share = math.ceil(rule.connections / processes)


# --- statements (built once per shape and dialect, every value a bind parameter) -----------

def _b(name: str, type_) -> bindparam:
    return bindparam(name, type_=type_())


def _key():
    return (D.c.ip_pool_id == _b("p_pool", Integer), D.c.destination == _b("p_dest", String))


def _not_backing_off():
    """No backoff now: none, over, or longer than the longest there can be (set under another
    clock, or before DELIVERY_PACING_BACKOFF_MAX_SECONDS was lowered)."""
    now = _b("p_now", DateTime)
    return or_(D.c.backoff_until.is_(None), D.c.backoff_until <= now,
               D.c.backoff_until > _b("p_backoff_horizon", DateTime))


def _admit_statements(dialect: str, slot: bool, rate: bool) -> list:
    """Take a rate cell (``rate``) and a connection slot (``slot``, with its lease) if the
    destination is not backing off and has them: the UPDATE matches no row otherwise."""
    now_ts = _b("p_now_ts", Float)
    conditions = [*_key(), _not_backing_off()]
    values = {"updated_at": _b("p_now", DateTime)}
    if rate:
        horizon = _b("p_tat_horizon", Float)  # beyond it the cell clock ran under another clock
        conditions.append(or_(D.c.tat <= _b("p_tat_limit", Float), D.c.tat > horizon))
        values["tat"] = case((and_(D.c.tat > now_ts, D.c.tat <= horizon), D.c.tat),
                             else_=now_ts) + _b("p_interval", Float)
    if slot:
        conditions.append(D.c.active < _b("p_connections", Integer))
        values["active"] = D.c.active + 1
    admit = update(D).where(*conditions).values(**values).returning(
        D.c.ip_pool_id, D.c.destination, D.c.throttles)
    if not slot:
        return [admit]
    lease_columns = ["ip_pool_id", "destination", "holder", "expires_at"]
    if dialect != "postgresql":
        return [admit, insert(L).values(
            ip_pool_id=_b("p_pool", Integer), destination=_b("p_dest", String),
            holder=_b("p_holder", String), expires_at=_b("p_expires", DateTime))]
    admitted = admit.cte("pace")
    lease = insert(L).from_select(lease_columns, select(
        admitted.c.ip_pool_id, admitted.c.destination, _b("p_holder", String),
        _b("p_expires", DateTime))).returning(L.c.holder).cte("lease")
    return [select(admitted.c.throttles).add_cte(lease)]


def admission_statements(dialect: str) -> tuple[list, object]:
    """The admission of a message on a held slot to a destination without a rate (no
    backoff now), decided with its in-flight marker: (the statements that run first in the
    marker's write, returning the destination's throttles; the condition the marker's
    INSERTs are conditional on). PostgreSQL: ``admission_cte`` and that it returned a row,
    one statement with the marker. SQLite: the UPDATE, then the marker's INSERTs under the
    same "no backoff now" test, in the marker's transaction (its write lock holds the row
    still between the two)."""
    if dialect == "postgresql":
        cte = admission_cte()
        return [cte], exists(select(cte.c.throttles))
    return writes.cached(("pacing-admit-sqlite",), lambda: (
        [update(D).where(*_key(), _not_backing_off()).values(updated_at=_b("p_now", DateTime))
         .returning(D.c.throttles)],
        exists(select(D.c.throttles).where(*_key(), _not_backing_off()))))


def admission_cte():
    """The admission of a message on a held slot to a destination without a rate (no
    backoff now), as the CTE ``admit`` the in-flight marker's statement is conditional on
    (PostgreSQL; built once, its values bind parameters: p_pool, p_dest, p_now,
    p_backoff_horizon). It returns the destination's throttles."""
    return writes.cached(("pacing-admit-cte",), lambda: update(D).where(
        *_key(), _not_backing_off()).values(updated_at=_b("p_now", DateTime))
        .returning(D.c.throttles).cte("admit"))


class Admission:
    """A message's admission left to its in-flight marker (see "At the marker"): the
    parameters of ``admission_cte``; ``throttles`` is set from the marker's statement when
    it matched."""

    def __init__(self, params: dict):
        self.params = params
        self.throttles: int | None = None


class NotAdmitted(Exception):
    """The marker's admission did not match: the destination may not take the message now
    (nothing was written; the session is left before DATA)."""


def _give_back_statements(dialect: str, lapsed: bool) -> list:
    """Give slots back: this worker's (``lapsed`` False) or every lapsed lease of the
    destination; ``active`` drops by the leases deleted (never below 0)."""
    which = L.c.expires_at < _b("p_now", DateTime) if lapsed else \
        L.c.holder == _b("p_holder", String)
    gone = delete(L).where(L.c.ip_pool_id == _b("p_pool", Integer),
                           L.c.destination == _b("p_dest", String), which).returning(L.c.holder)
    if dialect != "postgresql":  # the count of the first feeds the second (see _run)
        less = _b("p_gone", Integer)
        return [gone, update(D).where(*_key()).values(
            active=case((D.c.active > less, D.c.active - less), else_=0))
            .returning(D.c.active)]
    gone = gone.cte("gone")
    less = select(func.count()).select_from(gone).scalar_subquery()
    return [update(D).where(*_key(), exists(select(gone.c.holder))).values(
        active=case((D.c.active > less, D.c.active - less), else_=0)).returning(D.c.active)]


def _ticket_statements(dialect: str) -> list:
    """The next wake-up time of a waiting message: ``wake_at`` + spacing, or ``p_base`` when
    that is later (or the line runs more than LINE_SECONDS ahead: start it again)."""
    base, spacing = _b("p_base", Float), _b("p_spacing", Float)
    following = D.c.wake_at + spacing
    return [update(D).where(*_key()).values(
        wake_at=case((and_(following > base, following <= _b("p_line_end", Float)), following),
                     else_=base)).returning(D.c.wake_at)]


def _throttled_statements(dialect: str) -> list:
    """Back off, unless a backoff already runs (a burst of throttle replies to several
    workers counts once)."""
    return [update(D).where(*_key(), _not_backing_off()).values(
        backoff_until=_b("p_until", DateTime), backoff_reason=_b("p_reason", String),
        throttles=D.c.throttles + 1, updated_at=_b("p_now", DateTime)).returning(D.c.throttles)]


def _delivered_statements(dialect: str) -> list:
    return [update(D).where(*_key(), D.c.throttles > 0).values(throttles=0)
            .returning(D.c.throttles)]


def _read_statements(dialect: str) -> list:
    return [select(D).where(*_key())]


def _create_statements(dialect: str) -> list:
    from sqlalchemy import text

    # The same text on both databases (INSERT ... ON CONFLICT DO NOTHING).
    return [text("INSERT INTO delivery_destinations (ip_pool_id, destination, throttles, tat, "
                 "wake_at, active, updated_at) VALUES (:p_pool, :p_dest, 0, 0, 0, 0, :p_now) "
                 "ON CONFLICT (ip_pool_id, destination) DO NOTHING")
            .bindparams(_b("p_now", DateTime))]


def _run(db, build, params: dict, *shape) -> list:
    """Run a pacing statement as its own transaction and return the rows it returned.
    PostgreSQL: one statement in autocommit mode. SQLite: the statements in order in the
    session (committed at once; it holds no other work here), a later one only when the
    first returned rows (``p_gone``: how many)."""
    dialect = db.get_bind().dialect.name
    statements = writes.cached(("pacing", build.__name__, dialect, *shape), lambda: [
        (stmt, tuple(stmt.compile(dialect=db.get_bind().dialect).params))
        for stmt in build(dialect, *shape)])
    autocommit = autocommit_engine()
    if autocommit is not None:
        stmt, names = statements[0]
        with autocommit.connect() as conn:
            result = conn.execute(stmt, {n: params[n] for n in names if n in params})
            return result.all() if result.returns_rows else []
    if all(stmt.is_dml for stmt, _ in statements):
        # its RETURNING gives counts and names: prebuilt, on the DBAPI cursor (writes.py)
        with writes.sqlite_transaction(db) as execute:
            first = _chain(statements, params,
                           lambda stmt, _names, values: execute(stmt, values, named=True))
        if db.in_transaction():  # work the session held commits with it, as below
            db.commit()
        return first

    def one(stmt, names, values) -> list:
        if stmt.is_dml:  # its RETURNING gives counts and names: prebuilt (writes.py)
            return writes.execute_prebuilt(db.connection(), stmt, values)
        # a read of the row (timestamps to convert) or the text of its creation
        result = db.execute(stmt, {n: values[n] for n in names if n in values})
        return result.all() if result.returns_rows else []

    first = _chain(statements, params, one)
    db.commit()
    return first


def _chain(statements: list, params: dict, execute) -> list:
    """SQLite's statements of a pacing write in order, each through ``execute(stmt, names,
    values)``; a later one only when the first returned rows (``p_gone``: how many). The
    first one's rows."""
    first: list = []
    for i, (stmt, names) in enumerate(statements):
        rows = execute(stmt, names, params)
        if i == 0:
            first = rows
            if not rows:
                break
            params = {**params, "p_gone": len(rows)}
    return first


# --- the worker's side ----------------------------------------------------------------------

class Pacer:
    """One worker run's pacing (a wake-up, or a batch): admits each message before it is
    sent, holds one connection slot at a time (the destination it is delivering to), and
    reports throttle replies and deliveries."""

    def __init__(self, worker: str):
        self.worker = worker
        self.held: tuple[int, str] | None = None  # the destination whose slot we hold
        self.slot: sessions.Slot | None = None    # that slot (and its session)
        self.current: tuple[int, str, _Limits, int] | None = None  # (pool, name, limits, throttles)
        self.pending: Admission | None = None  # the current message's, left to its marker
        self._destinations: dict[tuple, tuple[str, Rule, _Limits]] = {}
        self._carried: list[tuple[handoff.Entry, str]] = []  # outcomes not written yet
        self._recorder = None  # the run's recorder (``carry``)
        self._share = 0  # the held destination's share of slots for this process

    def admit(self, db, message, hosts: list[tuple[str, int]], mx: bool) -> Wait | None:
        """None: send now (a slot and a rate cell are taken). Else when it may go. ``mx``:
        ``hosts`` are the recipient domain's MX hosts (not DELIVERY_RELAY nor the pool's
        relay), so a rule may find the destination by them."""
        previous, self.current, self.pending = self.current, None, None
        if hosts == [client.CAPTURE]:  # nothing leaves the machine: nothing to pace
            return None
        pool = message.ip_pool_id or 0
        name, rule, limits = self._destination(message.rcpt_to.rpartition("@")[2],
                                               hosts if mx else [])
        if self.held is not None and self.held != (pool, name):
            self._finish(db, previous)  # moving on: the previous destination is done
        slot, key = self.held is None, (pool, name)
        throttles = previous[3] if previous is not None and previous[:2] == key else None
        if slot:  # a slot this process parked with an idle session to the destination?
            adopted = self._adopt(db, pool, name)
            if adopted is not None:
                self._hold(key, adopted, limits)
                handoff.hold(key)
                slot = False
                # its last message was sent or refused for good over that session: as for
                # the next message of a run, its marker admits this one
                throttles = adopted.throttles
            elif not handoff.reserve(key, limits.share):
                # This process has its share of the destination's slots in use (or being
                # taken): its holders carry the message; the other slots stay for the other
                # processes.
                return _or_line(_slot_wait(pool, name, limits, clock.now()), pool, name)
        if not slot and not rule.per_minute and throttles is not None:
            # The slot is ours and its session open: admitted by the marker's statement.
            now = clock.now()
            self.pending = Admission({
                "p_pool": pool, "p_dest": name, "p_now": now,
                "p_backoff_horizon": _backoff_horizon(limits, now)})
            self.current = (pool, name, limits, throttles)
            return None
        reserved = slot  # counted among the line's holders until a slot is ours, or not
        try:
            for _ in range(3):
                # Another run of this process holding a slot may let go while we ask: then
                # its slot is parked (ours to adopt) or free, and we ask again, not pace.
                others = slot and handoff.holders(key) > 1
                now = clock.now()
                taking = sessions.Slot(pool, name, self.worker) if slot else None
                params = _params(pool, name, limits, now,
                                 holder=taking.holder if taking else self.worker)
                rows = _run(db, _admit_statements, params, slot, bool(rule.per_minute))
                if rows:
                    if slot:
                        self._hold(key, taking, limits)
                        reserved = False
                    self.current = (pool, name, limits, rows[0].throttles)
                    return None
                wait = _refused(db, pool, name, limits, slot, now)
                if wait is not None and wait.busy and others and handoff.holders(key) <= 1:
                    adopted = self._adopt(db, pool, name)
                    if adopted is not None:
                        self._hold(key, adopted, limits)
                        reserved, slot = False, False
                    continue
                if wait is not None:
                    break
            else:  # raced three times in a row (another worker changed the row each time)
                wait = _slot_wait(pool, name, limits, clock.now())
        finally:
            if reserved:  # no slot after all: the reservation goes (messages handed to it
                handoff.let_go(key)  # go back to their runs)
        return _or_line(wait, pool, name)

    def _hold(self, key: tuple[int, str], slot: sessions.Slot | None,
              limits: _Limits) -> None:
        """The slot is ours; the run is counted among the line's holders (``handoff``),
        so other runs of the process may hand it their messages."""
        self.held, self.slot, self._share = key, slot, limits.share

    def _adopt(self, db, pool: int, name: str) -> sessions.Slot | None:
        found, stale = sessions.adopt(pool, name)
        for old in stale:
            _give_back(db, old)
        return found

    def session_slot(self) -> sessions.Slot | None:
        """The slot the current message goes out on (its session is the slot's)."""
        if self.current is None or self.slot is None or self.held != self.current[:2]:
            return None
        return self.slot

    def _destination(self, domain: str, hosts: list) -> tuple[str, Rule, _Limits]:
        """``destination`` and its limits, kept for the run (a batch's messages mostly go
        to a few domains; working them out reads the settings three times, ~70 us)."""
        key = (domain, tuple(hosts))
        found = self._destinations.get(key)
        if found is None:
            name, rule = destination(domain, hosts)
            found = self._destinations[key] = (name, rule, _Limits(rule))
        return found

    def take_admission(self) -> Admission | None:
        """The current message's admission, for its marker's statement (once)."""
        pending, self.pending = self.pending, None
        return pending

    def not_admitted(self, db) -> Wait:
        """The marker's admission did not match: when the message may go. The slot is given
        back, so the next message for the destination asks before connecting."""
        pool, name, limits, _ = self.current
        self.current = None
        self.finish(db)
        now = clock.now()
        wait = _refused(db, pool, name, limits, False, now)
        # None: the row changed between the two statements; try again shortly.
        return wait or _slot_wait(pool, name, limits, now)

    def settle(self, db, outcome: client.Outcome, admission: Admission | None = None) -> None:
        """After an attempt: a throttle reply backs the destination off for every worker; a
        delivery ends a row of throttles. ``admission``: the message's, when its marker
        admitted it (its throttles are the destination's as of then)."""
        if self.current is None:
            return
        if admission is not None and admission.throttles is not None:
            self.current = (*self.current[:3], admission.throttles)
        pool, name, limits, throttles = self.current
        if is_throttle(outcome):
            _back_off(db, pool, name, limits, throttles, outcome)
        elif outcome.status == client.SENT and throttles:
            _run(db, _delivered_statements, {"p_pool": pool, "p_dest": name})
            self.current = (pool, name, limits, 0)
        if outcome.status not in (client.SENT, client.HARD):
            # A deferral, a throttle or a broken session: the next message for the
            # destination asks before it connects, not at its marker.
            self.current = None

    def carry(self, db, recorder) -> None:
        """Carry the messages other runs of this process handed to the held slot's line
        (``handoff.py``) over its session, each for its own claim; call between the run's
        own messages and after the last. A message whose claim expired in line is not
        started (nothing sent or written: it is due again as any expired claim)."""
        self._recorder = recorder
        self._settle_carried()
        while self.held is not None:
            entry = handoff.take(self.held)
            if entry is None:
                break
            if entry.expired():
                entry.finish("claim-lost")
                continue
            if recorder.claim_open:  # the run's own claim commits before another's work
                db.commit()
            servers = tenancy.current(db).server_ids
            if entry.server_id not in servers:  # act for the carried message's server too
                tenancy.act(db, tenancy.for_servers((*servers, entry.server_id)))
            try:
                result = entry.carry(db, recorder, self)
            except BaseException as error:
                if not isinstance(error, Exception):  # the run is being stopped: say so
                    entry.finish("failed")
                    raise
                # As for the run's own messages: the claim stays and expires, so the message
                # is retried (its marker, if written, makes that worker hold it instead).
                log.exception("delivery of message %s (handed over) failed unexpectedly",
                              entry.message_id)
                db.rollback()
                result = "failed"
            self._carried.append((entry, result))
            self._settle_carried()
        if self._carried:  # their claimants wait: write the last outcome now
            recorder.flush()
            self._settle_carried()

    def _settle_carried(self) -> None:
        """Tell the claimants of carried messages whose outcome is written what happened."""
        recorder, left = self._recorder, []
        for entry, result in self._carried:
            if recorder is not None and recorder.holds(entry.message_id):
                left.append((entry, result))  # rides on the next marker: not written yet
            elif recorder is not None and recorder.was_lost(entry.message_id):
                entry.finish("claim-lost")
            else:
                entry.finish(result)
        self._carried = left

    def abandon(self) -> None:
        """The run ends in error: the slot is left to lapse (as its claims are); messages
        still in its line go back to their claimants, and a carried one whose outcome was
        not written is reported failed (its claim expires; its marker, if any, speaks)."""
        if self.held is not None:
            key, self.held, self.slot = self.held, None, None
            handoff.let_go(key)
        for entry, _ in self._carried:
            entry.finish("failed")
        self._carried = []

    def finish(self, db) -> None:
        """Done with the held slot's destination: park the slot with its session, idle,
        for the next run (sessions.py), or give it back. Messages handed to its line since
        the last ``carry`` go back to their claimants, which may adopt the slot just
        parked."""
        self._finish(db, self.current)

    def _finish(self, db, last: tuple | None) -> None:
        """``finish``; ``last``: the run's ``current`` after its last message. When that
        message was sent or refused for good, the slot is parked with the destination's
        throttles as they were, so the adopting run's first message is admitted at its
        marker."""
        if self.held is not None:
            key, slot, self.held, self.slot = self.held, self.slot, None, None
            if slot is not None:
                slot.throttles = last[3] if last is not None and last[:2] == key else None
            # Parked only while the process keeps no more than its share of the slots
            # (in use by its other runs, or parked): the rest go back to other processes.
            keep = handoff.holders(key) - 1 + sessions.parked(*key) < self._share
            if slot is not None and keep and sessions.park(slot):
                _start_reaper()
            elif slot is not None:
                slot.drop()  # closed (QUIT), then its slot given back
                _give_back(db, slot)
            handoff.let_go(key)
        self._settle_carried()


def _give_back(db, slot: sessions.Slot) -> None:
    pool, name = slot.key
    _run(db, _give_back_statements, {"p_pool": pool, "p_dest": name, "p_holder": slot.holder},
         False)


def release_idle(everything: bool = False) -> int:
    """Close the parked sessions idle for DELIVERY_SESSION_IDLE_SECONDS (``everything``:
    all of them, as a Lambda invocation ends) and give their slots back."""
    slots = sessions.expired(everything)
    if slots:
        with session_scope() as db:
            for slot in slots:
                _give_back(db, slot)
    return len(slots)


_reaper: threading.Thread | None = None
_reaper_lock = threading.Lock()


def _start_reaper() -> None:
    """A thread of the process closes parked sessions once idle too long (not on Lambda:
    a frozen function runs nothing between invocations; the handler releases them all)."""
    global _reaper
    if _reaper is not None or os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return
    with _reaper_lock:
        if _reaper is None:
            _reaper = threading.Thread(target=_reap, name="delivery-session-reaper",
                                       daemon=True)
            _reaper.start()


def _reap() -> None:
    while True:
        time.sleep(max(0.05, min(1.0, sessions.idle_seconds() / 4)))
        try:
            release_idle()
        except Exception:  # noqa: BLE001  (the database away: the leases lapse anyway)
            log.exception("closing idle delivery sessions failed")


def _params(pool: int, name: str, limits: _Limits, now: datetime, holder: str) -> dict:
    ts = _ts(now)
    return {"p_pool": pool, "p_dest": name, "p_now": now, "p_now_ts": ts,
            "p_backoff_horizon": _backoff_horizon(limits, now),
            "p_tat_limit": ts + limits.tolerance, "p_tat_horizon": _tat_horizon(limits, ts),
            "p_interval": limits.interval, "p_connections": limits.rule.connections,
            "p_holder": holder, "p_expires": now + timedelta(seconds=limits.lease)}


def _backoff_horizon(limits: _Limits, now: datetime) -> datetime:
    return now + timedelta(seconds=limits.backoff_max + CLOCK_SKEW_SECONDS)


def _tat_horizon(limits: _Limits, ts: float) -> float:
    return ts + limits.tolerance + limits.interval + CLOCK_SKEW_SECONDS


def _refused(db, pool: int, name: str, limits: _Limits, slot: bool,
             now: datetime) -> Wait | None:
    """Why the admission matched no row, as the wait it means; None: try again (the row was
    missing and is made now, lapsed slots were given back, or the row changed meanwhile)."""
    key = {"p_pool": pool, "p_dest": name, "p_now": now}
    rows = _run(db, _read_statements, key)
    if not rows:
        _run(db, _create_statements, key)
        return None
    row, ts, label = rows[0], _ts(now), _label(pool, name)
    if row.backoff_until is not None and now < row.backoff_until <= \
            _backoff_horizon(limits, now):
        until = _ticket(db, pool, name, limits, row.backoff_until, now)
        return Wait(until, f"waiting: {label} answered a throttle reply "
                           f"({row.backoff_reason}); no worker connects to it before "
                           f"{_iso(row.backoff_until)}; next attempt at {_iso(until)} "
                           "(pacing)", name)
    if slot and row.active >= limits.rule.connections:
        evicted = sessions.evict(pool, name)  # our own idle sessions there: closed
        for parked in evicted:
            _give_back(db, parked)
        if evicted or _run(db, _give_back_statements, key, True):  # or dead workers' leases
            return None
        return _slot_wait(pool, name, limits, now)
    if limits.interval and ts + limits.tolerance < row.tat <= _tat_horizon(limits, ts):
        until = _ticket(db, pool, name, limits, _moment(row.tat - limits.tolerance), now)
        return Wait(until, f"waiting: {label} takes at most {limits.rule.per_minute} messages "
                           f"a minute; next attempt at {_iso(until)} (pacing)", name)
    return None


def _slot_wait(pool: int, name: str, limits: _Limits, now: datetime) -> Wait:
    seconds = get_settings().scaled(SLOT_WAIT_SECONDS) * random.uniform(0.5, 1.5)
    until = now + timedelta(seconds=seconds)
    return Wait(until, f"waiting: all {limits.rule.connections} connections to "
                       f"{_label(pool, name)} are in use; next attempt at {_iso(until)} "
                       "(pacing)", name, busy=True)


def _or_line(wait: Wait, pool: int, name: str) -> Wait:
    """Every slot taken, one by a run of this process: the wait names its line."""
    if wait.busy and handoff.held((pool, name)):
        wait.line = (pool, name)
    return wait


def _ticket(db, pool: int, name: str, limits: _Limits, base: datetime, now: datetime) -> datetime:
    base_ts = _ts(max(base, now))
    rows = _run(db, _ticket_statements, {
        "p_pool": pool, "p_dest": name, "p_base": base_ts, "p_spacing": limits.spacing,
        "p_line_end": base_ts + get_settings().scaled(LINE_SECONDS)})
    return _moment(rows[0].wake_at) if rows else _moment(base_ts)


def _back_off(db, pool: int, name: str, limits: _Limits, throttles: int,
              outcome: client.Outcome) -> None:
    now = clock.now()
    seconds = min(limits.backoff_max, limits.backoff_base * 2 ** min(throttles, 30))
    until = now + timedelta(seconds=seconds)
    reply = f"{outcome.code} {outcome.output or ''}".strip()[:500]
    rows = _run(db, _throttled_statements, {
        "p_pool": pool, "p_dest": name, "p_now": now, "p_until": until, "p_reason": reply,
        "p_backoff_horizon": _backoff_horizon(limits, now)})
    if rows:  # the first throttle of a burst: the one that starts the backoff
        observability.log("delivery.throttled", "warning", destination=name, ip_pool_id=pool,
                          host=outcome.host, reply=reply, throttles=rows[0].throttles,
                          backoff_until=until)


IDLE_DAYS = 1


def forget_idle(db, now: datetime, limit: int = 1000) -> int:
    """Delete (up to ``limit``) destinations nobody delivered to for IDLE_DAYS, holding no
    slot and backing off no more (their rate and wake-up times are long past): one row per
    recipient domain ever seen would otherwise stay for good. Retention's hourly run calls
    it."""
    idle = select(D.c.ip_pool_id, D.c.destination).where(
        D.c.updated_at < now - timedelta(days=IDLE_DAYS), D.c.active == 0,
        or_(D.c.backoff_until.is_(None), D.c.backoff_until < now)).limit(limit)
    return db.execute(delete(D).where(tuple_(D.c.ip_pool_id, D.c.destination).in_(idle))
                      .execution_options(synchronize_session=False)).rowcount


def paced_values(message, wait: Wait) -> dict:
    """The message's columns while it waits: due when it may go, the reason shown; its
    status stays (a Scheduled message is now simply Pending), no attempt is counted."""
    values = {"next_attempt_at": wait.until, "status_details": wait.reason}
    if message.status == statuses.SCHEDULED:
        values["status"] = statuses.PENDING
    return values
