"""The reputation guard of every server, as the large hosted services keep one: its bounce
rate and complaint rate over a sliding window of the mail it sent, a warning above the
warning thresholds, and its sending paused above the pause thresholds.

What is counted
---------------
* ``sent``: the server's messages that got a final delivery outcome in the window
  (``MessageSent`` + ``MessageDeliveryFailed``; the hourly event counters of db/counters.py,
  which every outcome already writes: nothing more is written for a message that goes out);
  ``delivered``: those accepted (``MessageSent``).
* ``bounces``: bounces that say the **address** is bad (a permanent failure whose reason is
  about the recipient: no such user, no such domain, the mailbox moved, the domain accepts
  no mail), from a refusal during delivery or a DSN; never a full mailbox, a block list, a
  content filter or a timeout. ``complaints``: spam complaints (feedback reports other than
  ``not-spam``).
* Each bounce and complaint is marked once per message (``reputation_marks``, unique on the
  message and the kind: a DSN sent twice, a DSN after a refusal at RCPT, a duplicate
  feedback report count once), and counts +1 in the server's hourly counter
  ``reputation:bounce`` / ``reputation:complaint`` in the same transaction.

bounce rate = bounces / sent, complaint rate = complaints / delivered, in percent, over the
last REPUTATION_WINDOW_HOURS (whole UTC hours: the oldest hour is counted whole); judged
only once the denominator reaches REPUTATION_MIN_VOLUME (no verdict on a small sample).

When it is judged
-----------------
Each counted bounce or complaint evaluates its server in the same transaction (reading a
window of hourly counters: about ``4 x hours`` index rows); the sweeper re-evaluates, at
most every REVIEW_SECONDS, the servers whose last evaluation found bounces or complaints
(``review``), since their window moves on without new ones (a warning ends; a rate can rise
as sent mail leaves the window).

* at or above a pause threshold (REPUTATION_GUARD=pause): the server's sending is
  suspended (``servers.suspended_at``: the API refuses sends with ``ServerSuspended``, SMTP
  with ``554 5.7.1``), with the reason in ``suspension_reason``, the guard's state
  ``paused``, the audit trail's ``server_paused``, the log ``reputation.paused`` and the
  metric ``ReputationPauses``; only an instance admin lifts it (``lift``, by
  ``POST .../unsuspend``);
* at or above a warning threshold (or a pause one with REPUTATION_GUARD=warn): state
  ``warning``, ``reputation.warning`` and ``ReputationWarnings`` once when it begins;
  ``reputation.recovered`` when a later evaluation finds it below again.

Every change of state is a conditional UPDATE (``WHERE state = ...``, ``WHERE suspended_at
IS NULL``): several workers evaluating at once pause (and warn) once.

After a lift the window restarts at the lift (``window_start``; the counts already in that
hour's bucket are kept in ``baseline`` and not counted), so the old window cannot pause the
server again at the next bounce: it must send REPUTATION_MIN_VOLUME messages again first.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, cast, func, select, update
from sqlalchemy.orm import Session

from chalicelib import clock, observability
from chalicelib.config import get_settings
from chalicelib.db import counters, session_scope, tenancy
from chalicelib.db.engine import upsert
from chalicelib.db.models import ReputationMark, Server, ServerReputation, StatCounter
from chalicelib.services.accounts import audit

BOUNCE, COMPLAINT = "bounce", "complaint"
METRIC = {BOUNCE: "reputation:bounce", COMPLAINT: "reputation:complaint"}
SENT_METRIC, FAILED_METRIC = "event:MessageSent", "event:MessageDeliveryFailed"
METRICS = (SENT_METRIC, FAILED_METRIC, METRIC[BOUNCE], METRIC[COMPLAINT])
OK, WARNING, PAUSED = "ok", "warning", "paused"
LEVELS = {OK: 0, WARNING: 1, PAUSED: 2}
REVIEW_SECONDS = 900  # the sweeper's re-evaluation of a server with bounces in its window
REVIEW_BATCH = 100
R = ServerReputation.__table__


@dataclass(frozen=True)
class Figures:
    since: datetime    # where the window starts (its oldest hour, or the lift)
    sent: int          # final delivery outcomes
    delivered: int     # of which accepted
    bounces: int       # about the address
    complaints: int

    @property
    def bounce_rate(self) -> float | None:
        return round(100.0 * self.bounces / self.sent, 3) if self.sent else None

    @property
    def complaint_rate(self) -> float | None:
        return round(100.0 * self.complaints / self.delivered, 3) if self.delivered else None


@dataclass(frozen=True)
class Finding:
    metric: str        # bounce_rate, complaint_rate
    level: str         # warning, pause
    rate: float
    threshold: float
    volume: int

    @property
    def message(self) -> str:
        what = ("bounce rate (bounces saying the address is bad, of messages sent)"
                if self.metric == "bounce_rate" else
                "complaint rate (spam complaints, of messages delivered)")
        return (f"{what} {self.rate:g}% of {self.volume} messages is at or above the "
                f"{self.level} threshold of {self.threshold:g}%")


def thresholds() -> dict:
    s = get_settings()
    return {"bounce_warning": s.reputation_bounce_warning_percent,
            "bounce_pause": s.reputation_bounce_pause_percent,
            "complaint_warning": s.reputation_complaint_warning_percent,
            "complaint_pause": s.reputation_complaint_pause_percent}


# ------------------------------------------------------------------------------ counting

def count(db: Session, server_id: int, message_id: int, kind: str,
          reason: str | None = None) -> bool:
    """Count one bounce about the address (``BOUNCE``) or one complaint of ``message_id``
    toward its server's rates, once per message and kind, and evaluate the server; False
    when it was counted before."""
    now = clock.now()
    table = ReputationMark.__table__
    stmt = upsert(db, table).values(server_id=server_id, message_id=message_id, kind=kind,
                                    reason=reason, created_at=now) \
        .on_conflict_do_nothing(index_elements=["message_id", "kind"]).returning(table.c.id)
    if db.execute(stmt).first() is None:
        return False
    counters.apply(db.connection(), Counter(
        {(server_id, "hour", counters.truncate(now, "hour"), METRIC[kind], ""): 1}))
    evaluate(db, server_id, now)
    return True


# ------------------------------------------------------------------------------ figures

def _state(db: Session, server_id: int):
    return db.execute(select(R).where(R.c.server_id == server_id)).first()


def figures(db: Session, server_id: int, state=None, now: datetime | None = None) -> Figures:
    """The server's counts over its window (``state``: its ServerReputation row, for a
    window restarted by a lift)."""
    now = now or clock.now()
    since = now - timedelta(hours=get_settings().reputation_window_hours)
    first = counters.truncate(since, "hour")
    baseline: dict = {}
    if state is not None and state.window_start is not None and state.window_start > since:
        since = state.window_start
        first = counters.truncate(since, "hour")
        baseline = state.baseline or {}
    totals = _sums(db, server_id, StatCounter.bucket >= first)
    for metric, n in baseline.items():  # already in the lift's hour before the lift
        totals[metric] -= int(n)
    value = lambda metric: max(0, totals[metric])  # noqa: E731
    return Figures(since, value(SENT_METRIC) + value(FAILED_METRIC), value(SENT_METRIC),
                   value(METRIC[BOUNCE]), value(METRIC[COMPLAINT]))


def _sums(db: Session, server_id: int, buckets) -> Counter:
    """The server's hourly counts of METRICS summed over the ``buckets`` condition."""
    return Counter({metric: int(n or 0) for metric, n in db.execute(
        select(StatCounter.metric, cast(func.sum(StatCounter.count), BigInteger))
        .where(StatCounter.server_id == server_id, StatCounter.period == "hour",
               StatCounter.dim == "", StatCounter.metric.in_(METRICS), buckets)
        .group_by(StatCounter.metric))})


def judge(f: Figures) -> list[Finding]:
    """What the thresholds say of ``f``: the rates at or above one, each at its highest
    level; nothing below REPUTATION_MIN_VOLUME."""
    s, limits = get_settings(), thresholds()
    found = []
    for metric, rate, volume, kind in (("bounce_rate", f.bounce_rate, f.sent, "bounce"),
                                       ("complaint_rate", f.complaint_rate, f.delivered,
                                        "complaint")):
        if rate is None or volume < s.reputation_min_volume:
            continue
        for level in ("pause", "warning"):
            threshold = limits[f"{kind}_{level}"]
            if rate >= threshold:
                found.append(Finding(metric, level, rate, threshold, volume))
                break
    return found


def level_of(found: list[Finding]) -> str:
    if any(f.level == "pause" for f in found):
        return PAUSED
    return WARNING if found else OK


# ------------------------------------------------------------------------------ evaluation

def evaluate(db: Session, server_id: int, now: datetime | None = None) -> str | None:
    """Judge the server now and act on it (see the module doc); returns its state, or None
    with REPUTATION_GUARD=off."""
    mode = get_settings().reputation_guard
    if mode == "off":
        return None
    now = now or clock.now()
    state = _state(db, server_id)
    if state is None:
        db.execute(upsert(db, R).values(server_id=server_id, state=OK)
                   .on_conflict_do_nothing(index_elements=["server_id"]))
        state = _state(db, server_id)
    f = figures(db, server_id, state, now)
    found = judge(f)
    level = level_of(found)
    reason = "; ".join(x.message for x in found) or None
    db.execute(update(R).where(R.c.server_id == server_id).values(
        sent=f.sent, delivered=f.delivered, bounces=f.bounces, complaints=f.complaints,
        bounce_rate=f.bounce_rate, complaint_rate=f.complaint_rate, evaluated_at=now))
    if state.state == PAUSED:
        return PAUSED  # until an instance admin lifts it
    if level == PAUSED and mode == "pause" and _pause(db, server_id, reason, f, now):
        return PAUSED
    if level != OK:
        _warn(db, server_id, reason, f, now)
        return WARNING
    if state.state == WARNING and db.execute(
            update(R).where(R.c.server_id == server_id, R.c.state == WARNING)
            .values(state=OK, warning_since=None, reason=None)).rowcount:
        observability.log("reputation.recovered", "info", server_id=server_id,
                          **_fields(f))
    return OK


def _fields(f: Figures) -> dict:
    return {"sent": f.sent, "delivered": f.delivered, "bounces": f.bounces,
            "complaints": f.complaints, "bounce_rate": f.bounce_rate,
            "complaint_rate": f.complaint_rate, "since": f.since}


def _pause(db: Session, server_id: int, reason: str, f: Figures, now: datetime) -> bool:
    """Suspend the server's sending, once (False: it was suspended already, by an admin)."""
    text = (f"paused by the reputation guard: {reason}; an instance administrator can lift "
            "the pause")
    with tenancy.across_tenants(db, "reputation-guard"):  # the audit trail is no tenant's
        if not db.execute(update(Server).where(Server.id == server_id,
                                               Server.suspended_at.is_(None))
                          .values(suspended_at=now, suspension_reason=text[:255])
                          .execution_options(synchronize_session=False)).rowcount:
            return False
        db.execute(update(R).where(R.c.server_id == server_id).values(
            state=PAUSED, paused_at=now, reason=text,
            warning_since=func.coalesce(R.c.warning_since, now)))
        name = db.scalar(select(Server.permalink).where(Server.id == server_id))
        audit.record(db, "server_paused", success=True,
                     details=f"server {server_id} ({name}) {text}"[:2000])
    observability.count("reputation_pauses")
    observability.log("reputation.paused", "warning", server_id=server_id, reason=reason,
                      **_fields(f))
    return True


def _warn(db: Session, server_id: int, reason: str, f: Figures, now: datetime) -> None:
    began = db.execute(update(R).where(R.c.server_id == server_id, R.c.state == OK)
                       .values(state=WARNING, warning_since=now, reason=reason)).rowcount
    if began:
        observability.count("reputation_warnings")
        observability.log("reputation.warning", "warning", server_id=server_id,
                          reason=reason, **_fields(f))
    else:  # still in warning: its reason follows the figures
        db.execute(update(R).where(R.c.server_id == server_id, R.c.state == WARNING)
                   .values(reason=reason))


def review(now: datetime | None = None) -> int:
    """The sweeper's turn: re-evaluate up to REVIEW_BATCH servers whose last evaluation,
    REVIEW_SECONDS ago or more, found bounces or complaints in their window; returns how
    many. (A server none was ever counted for has nothing to judge.)"""
    if get_settings().reputation_guard == "off":
        return 0
    now = now or clock.now()
    with session_scope() as db, tenancy.across_tenants(db, "reputation-guard"):
        ids = list(db.scalars(
            select(R.c.server_id).where(R.c.state != PAUSED,
                                        (R.c.bounces > 0) | (R.c.complaints > 0),
                                        R.c.evaluated_at < now - timedelta(seconds=REVIEW_SECONDS))
            .order_by(R.c.evaluated_at).limit(REVIEW_BATCH)))
        for server_id in ids:
            evaluate(db, server_id, now)
    return len(ids)


# ------------------------------------------------------------------------------ reading

def paused(db: Session, server: Server) -> bool:
    """The server's sending is suspended by the guard (not by a person)."""
    state = _state(db, server.id)
    return server.suspended and state is not None and state.state == PAUSED


def status(db: Session, server: Server) -> dict:
    """The guard's view of the server now (GET .../servers/{server}/reputation)."""
    s = get_settings()
    state = _state(db, server.id)
    f = figures(db, server.id, state)
    found = judge(f)
    return {
        "state": state.state if state is not None else OK,
        "guard": s.reputation_guard, "window_hours": s.reputation_window_hours,
        "since": f.since, "min_volume": s.reputation_min_volume,
        "enough_volume": f.sent >= s.reputation_min_volume,
        "sent": f.sent, "delivered": f.delivered, "bounces": f.bounces,
        "complaints": f.complaints, "bounce_rate": f.bounce_rate,
        "complaint_rate": f.complaint_rate, "thresholds": thresholds(),
        "findings": [{"metric": x.metric, "level": x.level, "rate": x.rate,
                      "threshold": x.threshold, "volume": x.volume, "message": x.message}
                     for x in found],
        "reason": state.reason if state is not None else None,
        **{key: getattr(state, key) if state is not None else None
           for key in ("warning_since", "paused_at", "lifted_at", "lifted_by",
                       "evaluated_at")},
    }


def brief(db: Session, server: Server) -> dict:
    """The guard's state as a server's record shows it (no counting: lists stay cheap)."""
    state = _state(db, server.id)
    if state is None:
        return {"state": OK, "reason": None, "since": None}
    since = {PAUSED: state.paused_at, WARNING: state.warning_since}.get(state.state)
    return {"state": state.state, "reason": state.reason, "since": since}


# ------------------------------------------------------------------------------ lifting

def lift(db: Session, server: Server, *, by: str, client: audit.Client = audit.NO_CLIENT,
         user=None) -> None:
    """An instance admin lifts the guard's pause: the state is ``ok`` again and the window
    restarts now (the counts already in this hour are kept as its baseline), so the old
    window cannot pause the server again. The caller unsuspends the server."""
    now = clock.now()
    bucket = counters.truncate(now, "hour")
    baseline = dict(_sums(db, server.id, StatCounter.bucket == bucket))
    db.execute(update(R).where(R.c.server_id == server.id).values(
        state=OK, reason=None, warning_since=None, paused_at=None, window_start=now,
        baseline=baseline, lifted_at=now, lifted_by=by[:255]))
    audit.record(db, "server_pause_lifted", client, user=user,
                 details=f"server {server.id} ({server.permalink}) by {by}; the guard's "
                         "window restarts now"[:2000])
    observability.log("reputation.lifted", "info", server_id=server.id, by=by)
