"""Send limits: at most ``send_limit_per_hour`` / ``send_limit_per_day`` messages of a server
(None = no limit) in the current UTC hour / day window, counted in the database so every
Lambda container and gateway task, HTTP and SMTP alike, draws from the same count.

One counter row per server and period (SendLimitCounter). ``admit`` adds what a submission
wants with one upsert per limited period (``RETURNING used``), then gives back the part over
the limit; the row stays locked until the submission commits, so concurrent submissions of a
server are admitted one after the other and never together over the limit. A rolled-back
submission rolls its count back too.

What counts: every outgoing message (one per recipient) accepted for delivery, scheduled or
not; messages held (suppressed, development mode, over the limit) do not. Over the limit,
``send_limit_action`` decides: ``hold`` stores the extra messages as Held (reason "send
limit") for a later bulk release; ``reject`` refuses the whole submission (HTTP 429
SendLimitExceeded with Retry-After; SMTP 451 at DATA). A release or retry by the tenant is
deliberate and is not counted again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import DateTime, Integer, bindparam, select, text
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.db.models import SendLimitCounter, Server

ACTIONS = ("hold", "reject")
PERIODS = ("hour", "day")
HELD_DETAILS = "send limit: the server's {period} limit of {limit} messages is reached; " \
               "held for release"


def window_start(period: str, now: datetime) -> datetime:
    start = now.replace(minute=0, second=0, microsecond=0)
    return start.replace(hour=0) if period == "day" else start


def window_end(period: str, now: datetime) -> datetime:
    return window_start(period, now) + (timedelta(days=1) if period == "day"
                                        else timedelta(hours=1))


def limits(server: Server) -> dict[str, int]:
    found = {"hour": server.send_limit_per_hour, "day": server.send_limit_per_day}
    return {period: limit for period, limit in found.items() if limit is not None}


# Adds :n in the current window (a newer window starts again from :n); returns the new count.
_ADD = text(
    "INSERT INTO send_limit_counters (server_id, period, window_start, used) "
    "VALUES (:server_id, :period, :start, :n) "
    "ON CONFLICT (server_id, period) DO UPDATE SET "
    "used = CASE WHEN excluded.window_start > send_limit_counters.window_start "
    "THEN excluded.used ELSE send_limit_counters.used + excluded.used END, "
    "window_start = CASE WHEN excluded.window_start > send_limit_counters.window_start "
    "THEN excluded.window_start ELSE send_limit_counters.window_start END "
    "RETURNING used"
).bindparams(bindparam("start", type_=DateTime()), bindparam("n", type_=Integer)) \
    .columns(used=Integer)
_GIVE_BACK = text("UPDATE send_limit_counters SET used = used - :n "
                  "WHERE server_id = :server_id AND period = :period")


@dataclass
class Admission:
    """How many of the wanted messages are within the limits, and when the tightest full
    window ends (for Retry-After)."""

    allowed: int
    period: str | None = None
    limit: int | None = None
    resets_at: datetime | None = None

    def retry_after(self) -> int:
        if self.resets_at is None:
            return 1
        return max(1, math.ceil((self.resets_at - clock.now()).total_seconds()))


def admit(db: Session, server: Server, wanted: int) -> Admission:
    """Count up to ``wanted`` messages against the server's limits in this transaction;
    returns how many fit. The caller stores the rest as held or refuses them; when it refuses
    them it must call ``give_back`` for any it counted but does not write."""
    active = limits(server)
    if not active or wanted <= 0:
        return Admission(allowed=wanted)
    now = clock.now()
    allowed, tightest = wanted, None
    for period in PERIODS:  # hour then day: every submission locks in the same order
        if period not in active:
            continue
        used = db.execute(_ADD, {"server_id": server.id, "period": period,
                                 "start": window_start(period, now), "n": wanted}).scalar_one()
        room = max(0, active[period] - (used - wanted))
        if room < allowed:
            allowed, tightest = room, period
    if allowed < wanted:
        give_back(db, server, wanted - allowed)
    if tightest is None:
        return Admission(allowed=allowed)
    return Admission(allowed=allowed, period=tightest, limit=active[tightest],
                     resets_at=window_end(tightest, now))


def admit_entries(db: Session, server: Server, wanted: list[int]
                  ) -> tuple[set[int], int | None, Admission | None]:
    """Count a submission's entries (``wanted``: the deliverable messages of each) against
    the limits. Returns the entries refused (action ``reject``: whole entries, in order, while
    they fit), how many more messages may go out before the rest are held (action ``hold``;
    None: no limit in the way) and the admission (for a refusal's Retry-After)."""
    total = sum(wanted)
    if not limits(server) or total == 0:
        return set(), None, None
    admission = admit(db, server, total)
    if admission.allowed >= total:
        return set(), None, admission
    if server.send_limit_action != "reject":
        return set(), admission.allowed, admission
    refused, room = set(), admission.allowed
    for index, n in enumerate(wanted):
        if n <= room:
            room -= n
        else:
            refused.add(index)
    give_back(db, server, room)  # counted for entries that were refused after all
    return refused, None, admission


def give_back(db: Session, server: Server, n: int) -> None:
    if n <= 0:
        return
    for period in limits(server):
        db.execute(_GIVE_BACK, {"n": n, "server_id": server.id, "period": period})


def exceeded(admission: Admission) -> errors.SendLimitExceeded:
    return errors.SendLimitExceeded(
        f"send limit exceeded: this server may send {admission.limit} messages per "
        f"{admission.period}; retry after {admission.retry_after()} s (or raise the limit)",
        retry_after=admission.retry_after())


def usage(db: Session | None, server: Server) -> dict:
    """The server record's ``send_limits``: the limits, the action and this window's use
    (``db`` None: no limit is set, nothing to read)."""
    now = clock.now()
    rows = {} if db is None else {row.period: row for row in db.scalars(
        select(SendLimitCounter).where(SendLimitCounter.server_id == server.id))}
    result: dict = {"action": server.send_limit_action}
    for period, limit in (("hour", server.send_limit_per_hour),
                          ("day", server.send_limit_per_day)):
        row = rows.get(period)
        used = row.used if row is not None and row.window_start >= window_start(period, now) \
            else 0
        result[f"per_{period}"] = limit
        result[f"used_this_{period}"] = used
        result[f"{period}_resets_at"] = window_end(period, now)
    return result
