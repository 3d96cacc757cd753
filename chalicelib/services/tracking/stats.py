"""A server's statistics over a time range, from rolled-up counters (``StatCounter``, kept in
step by chalicelib/db/counters.py) plus short indexed range scans for partial buckets.

- Messages count by ``created_at`` in ``[from, to)`` with their current status. Whole UTC
  days of the range come from the daily counters; the partial days at either edge (less than
  a day each) are counted from the rows through ``ix_messages_server_created``.
- Opens and clicks count by when they happened; ``unique_opens``/``unique_clicks`` count
  messages whose FIRST open/click falls in the range (additive over days, streams and tags).
- Opens and clicks over time (``engagement``) come from the same metrics counted per UTC
  day, and per UTC hour for the whole server; edges from ``open_events``/``click_events``.
- Delivery outcomes over time are the MessageSent, MessageDelayed, MessageDeliveryFailed and
  MessageHeld events, from hourly counters, edges (partial hours) from ``message_events``.
So the cost grows with the number of days (and streams, tags), not with the number of messages.
- Bounce categories are the exception: ``bounce_categories`` (outgoing messages now
  SoftFail, HardFail or Bounced, by the category of their last failure or bounce),
  ``failed_attempt_categories`` (every failed attempt of the range's messages) and
  ``complaints`` (feedback reports received) are counted from the rows through
  ``ix_messages_server_category`` (server, category, created): ``bounce_category IS NOT
  NULL`` skips the messages that never failed, so the cost grows with the server's failures
  (as far back as retention keeps them), not with all its mail.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, cast, func, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors, statuses
from chalicelib.db import counters
from chalicelib.db.models import (ClickEvent, Delivery, Message, MessageEvent, OpenEvent,
                                  StatCounter, Stream)
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import stats as shape

DEFAULT_RANGE = timedelta(days=30)
INTERVALS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
MAX_BUCKETS = 1000
OUTCOMES = {"MessageSent": "sent", "MessageDelayed": "delayed",
            "MessageDeliveryFailed": "failed", "MessageHeld": "held"}
ENGAGEMENT = ("opens", "unique_opens", "machine_opens", "clicks", "unique_clicks",
              "machine_clicks")
COUNTERS = ("messages", "held", "bounces", "incoming", "opens", "unique_opens", "machine_opens",
            "clicks", "unique_clicks", "machine_clicks")


def resolve_range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """Defaults: ``to`` now, ``from`` 30 days before ``to``."""
    end = end or clock.now()
    start = start or end - DEFAULT_RANGE
    if start >= end:
        raise errors.ValidationError("from must be before to", field="from")
    return start, end


def _ceil(value: datetime, unit: str) -> datetime:
    floor = counters.truncate(value, unit)
    return floor if floor == value else floor + INTERVALS[unit]


def _split(start: datetime, end: datetime, unit: str):
    """(whole buckets [a, b) or None, partial edge ranges) covering [start, end); each edge
    lies inside one bucket (a range across one boundary without a whole bucket has two)."""
    a, b = _ceil(start, unit), counters.truncate(end, unit)
    if a > b:  # start and end inside the same bucket
        return None, [(start, end)]
    return ((a, b) if a < b else None), [r for r in ((start, a), (b, end)) if r[0] < r[1]]


def _rows_counts(db: Session, server_id: int, start: datetime, end: datetime) -> Counter:
    """(metric, dim) counts straight from the rows: only used for edges shorter than a day."""
    out: Counter = Counter()
    for scope, status, bounce, held, stream_id, tag, n in db.execute(
            select(Message.scope, Message.status, Message.bounce, Message.held,
                   Message.stream_id, Message.tag, func.count())
            .where(Message.server_id == server_id, Message.created_at >= start,
                   Message.created_at < end)
            .group_by(Message.scope, Message.status, Message.bounce, Message.held,
                      Message.stream_id, Message.tag)):
        for metric in counters.message_metrics(scope, status, bounce, held):
            for dim in counters.dims(stream_id, tag):
                out[(metric, dim)] += n
    for model, kind in ((OpenEvent, "opens"), (ClickEvent, "clicks")):
        for stream_id, tag, machine, first, n in db.execute(
                select(model.stream_id, model.tag, model.likely_machine, model.first,
                       func.count())
                .where(model.server_id == server_id, model.created_at >= start,
                       model.created_at < end)
                .group_by(model.stream_id, model.tag, model.likely_machine, model.first)):
            for metric in counters.event_metrics(kind, machine, first):
                for dim in counters.dims(stream_id, tag):
                    out[(metric, dim)] += n
    return out


def _counter_rows(db: Session, server_id: int, period: str, start: datetime, end: datetime,
                  *columns):
    return db.execute(
        select(*columns, cast(func.sum(StatCounter.count), BigInteger))  # not numeric/Decimal
        .where(StatCounter.server_id == server_id, StatCounter.period == period,
               StatCounter.bucket >= start, StatCounter.bucket < end)
        .group_by(*columns))


@builds(shape.Stats)
def summary(db: Session, server_id: int, start: datetime | None = None,
            end: datetime | None = None) -> dict:
    start, end = resolve_range(start, end)
    whole, edges = _split(start, end, "day")
    counts: Counter = Counter()
    if whole:
        for metric, dim, n in _counter_rows(db, server_id, "day", *whole,
                                            StatCounter.metric, StatCounter.dim):
            counts[(metric, dim)] += int(n)
    for edge in edges:
        counts.update(_rows_counts(db, server_id, *edge))

    groups: dict = defaultdict(lambda: {**dict.fromkeys(COUNTERS, 0), "by_status": {}})
    for (metric, dim), n in counts.items():
        if not n:
            continue
        group = groups[dim]
        if metric.startswith("status:"):
            group["by_status"][metric[len("status:"):]] = n
            group["messages"] += n
        else:
            group[metric] += n

    categorised = (Message.server_id == server_id, Message.created_at >= start,
                   Message.created_at < end, Message.bounce_category.is_not(None))
    for stream_id, bounce, category, n in db.execute(
            select(Message.stream_id, Message.bounce, Message.bounce_category, func.count())
            .where(*categorised, Message.status.in_((statuses.SOFT_FAIL, statuses.HARD_FAIL,
                                                     statuses.BOUNCED, statuses.PROCESSED)))
            .group_by(Message.stream_id, Message.bounce, Message.bounce_category)):
        # a stored report has no stream of its own: counted for the server only
        for dim in [""] if bounce else counters.dims(stream_id, None):
            group = groups[dim]
            if bounce:  # a stored report: only complaints count here (DSNs are ``bounces``)
                if category == "complaint":
                    group["complaints"] = group.get("complaints", 0) + n
            else:
                found = group.setdefault("bounce_categories", {})
                found[category] = found.get(category, 0) + n

    # Failed attempts (a message may fail several times before it is sent or given up) of
    # the messages of the range, by category.
    for stream_id, category, n in db.execute(
            select(Message.stream_id, Delivery.category, func.count())
            .join(Delivery, Delivery.message_id == Message.id)
            # a message with a failed attempt has a category: the index finds them
            .where(*categorised, Message.scope == "outgoing", Delivery.category.is_not(None))
            .group_by(Message.stream_id, Delivery.category)):
        for dim in counters.dims(stream_id, None):
            found = groups[dim].setdefault("failed_attempt_categories", {})
            found[category] = found.get(category, 0) + n

    def shape(group: dict) -> dict:
        return {**group, "by_status": dict(sorted(group["by_status"].items())),
                "bounce_categories": dict(sorted(group.get("bounce_categories", {}).items())),
                "failed_attempt_categories": dict(sorted(
                    group.get("failed_attempt_categories", {}).items())),
                "complaints": group.get("complaints", 0)}

    permalinks = dict(db.execute(select(Stream.id, Stream.permalink)
                                 .where(Stream.server_id == server_id)).all())
    streams = sorted((int(d[2:]), g) for d, g in groups.items() if d.startswith("s:"))
    tags = sorted((d[2:], g) for d, g in groups.items() if d.startswith("t:"))
    return {
        "from": start, "to": end, **shape(groups[""]),
        "streams": [{"stream": permalinks.get(sid), **shape(g)} for sid, g in streams],
        "tags": [{"tag": tag, **shape(g)} for tag, g in tags],
    }


def _bucketing(start: datetime, end: datetime, interval: str | None) -> tuple[str, datetime]:
    """The interval (default: hour for ranges up to two days, day beyond) and the start of
    the first bucket; a 422 past MAX_BUCKETS."""
    if interval is None:
        interval = "hour" if end - start <= timedelta(days=2) else "day"
    if interval not in INTERVALS:
        raise errors.ValidationError("interval must be hour or day", field="interval")
    first = counters.truncate(start, interval)
    if (end - first) / INTERVALS[interval] > MAX_BUCKETS:
        raise errors.ValidationError(
            f"the range holds more than {MAX_BUCKETS} {interval} buckets; narrow it or use a "
            "longer interval", field="interval")
    return interval, first


def _series(start: datetime, end: datetime, interval: str, first: datetime, by_bucket: dict,
            names) -> dict:
    """Every bucket of the range, empty or not, with the totals."""
    buckets, totals = [], dict.fromkeys(names, 0)
    at = first
    while at < end:
        entry = by_bucket.get(at) or dict.fromkeys(names, 0)
        buckets.append({"start": at, **entry})
        for key, n in entry.items():
            totals[key] += n
        at += INTERVALS[interval]
    return {"from": start, "to": end, "interval": interval, "totals": totals,
            "buckets": buckets}


@builds(shape.DeliveryStats)
def deliveries(db: Session, server_id: int, start: datetime | None = None,
               end: datetime | None = None, interval: str | None = None) -> dict:
    """Delivery outcomes per UTC hour or day; every bucket of the range is listed, empty or
    not. Default interval: hour for ranges up to two days, day beyond."""
    start, end = resolve_range(start, end)
    interval, first = _bucketing(start, end, interval)
    by_bucket: dict = defaultdict(lambda: dict.fromkeys(OUTCOMES.values(), 0))
    whole, edges = _split(start, end, "hour")
    if whole:
        for hour, metric, n in _counter_rows(db, server_id, "hour", *whole,
                                             StatCounter.bucket, StatCounter.metric):
            name = OUTCOMES.get(metric[len("event:"):])
            if name:
                by_bucket[counters.truncate(counters.as_datetime(hour), interval)][name] += int(n)
    for edge_start, edge_end in edges:  # each inside one hour, so inside one bucket
        for name, n in db.execute(
                select(MessageEvent.event, func.count())
                .where(MessageEvent.server_id == server_id,
                       MessageEvent.created_at >= edge_start, MessageEvent.created_at < edge_end,
                       MessageEvent.event.in_(list(OUTCOMES)))
                .group_by(MessageEvent.event)):
            by_bucket[counters.truncate(edge_start, interval)][OUTCOMES[name]] += n
    return _series(start, end, interval, first, by_bucket, OUTCOMES.values())


@builds(shape.EngagementStats)
def engagement(db: Session, server_id: int, start: datetime | None = None,
               end: datetime | None = None, interval: str | None = None) -> dict:
    """Opens and clicks per UTC hour or day, counted when they happened (as GET /stats counts
    them: ``unique_*`` are the messages' first open or click). Whole buckets come from the
    server's counters of that period (hourly ones exist since migration 0012 for the events
    kept then); the partial buckets at the range's edges are counted from the event rows."""
    start, end = resolve_range(start, end)
    interval, first = _bucketing(start, end, interval)
    by_bucket: dict = defaultdict(lambda: dict.fromkeys(ENGAGEMENT, 0))
    whole, edges = _split(start, end, interval)
    if whole:
        for bucket, metric, n in db.execute(
                select(StatCounter.bucket, StatCounter.metric,
                       cast(func.sum(StatCounter.count), BigInteger))
                .where(StatCounter.server_id == server_id, StatCounter.period == interval,
                       StatCounter.bucket >= whole[0], StatCounter.bucket < whole[1],
                       StatCounter.dim == "", StatCounter.metric.in_(ENGAGEMENT))
                .group_by(StatCounter.bucket, StatCounter.metric)):
            by_bucket[counters.as_datetime(bucket)][metric] += int(n)
    for edge_start, edge_end in edges:  # each inside one bucket
        entry = by_bucket[counters.truncate(edge_start, interval)]
        for model, kind in ((OpenEvent, "opens"), (ClickEvent, "clicks")):
            for machine, first_event, n in db.execute(
                    select(model.likely_machine, model.first, func.count())
                    .where(model.server_id == server_id, model.created_at >= edge_start,
                           model.created_at < edge_end)
                    .group_by(model.likely_machine, model.first)):
                for metric in counters.event_metrics(kind, machine, first_event):
                    entry[metric] += n
    return _series(start, end, interval, first, by_bucket, ENGAGEMENT)
