"""GET /stats and /stats/deliveries agree with rows made in the test, bucket by bucket."""
from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime, timedelta

import requests

from chalicelib.db.models import ClickEvent, MessageEvent, OpenEvent, Stream, TrackedLink
from chalicelib.services.tracking import engagement
from tests.support.tracking import (HTML_MESSAGE, default_stream_id, html_and_text,
                                        make_message, server_id, tracking_urls)
from tests.support import Api, all_tenants

T0 = datetime(2031, 3, 10, 0, 0, 0)  # a fixed range nothing else writes to


def _iso(value: datetime) -> str:
    return value.isoformat() + "Z"


def _stats(api, tenant, path="/api/v2/server/stats", **query):
    params = {k: _iso(v) if isinstance(v, datetime) else v for k, v in query.items()}
    return Api.data(api.get(path, server_key=tenant.api_key, params=params), 200)["stats"]


def _seed(sid: int):
    """Messages inside and around [T0, T0+3h) with their statuses, streams and tags."""
    with all_tenants() as db:
        outbound = default_stream_id(sid)
        news = Stream(server_id=sid, name="News", permalink="news", stream_type="broadcast")
        db.add(news)
        db.flush()
        news = news.id
        plan = [  # (minutes after T0, status, stream, tag)
            (0, "Sent", outbound, "welcome"), (5, "Sent", outbound, "welcome"),
            (59, "HardFail", outbound, None), (60, "Held", news, "digest"),
            (61, "SoftFail", news, "digest"), (125, "Sent", news, None),
            (179, "Pending", outbound, "welcome"),
        ]
        made = [make_message(db, sid, created_at=T0 + timedelta(minutes=m), status=s,
                             stream_id=st, tag=tag, held=(s == "Held"))
                for m, s, st, tag in plan]
        # outside the range: just before, and exactly at the (exclusive) end
        make_message(db, sid, created_at=T0 - timedelta(seconds=1))
        make_message(db, sid, created_at=T0 + timedelta(hours=3))
        # an incoming bounce inside the range
        make_message(db, sid, created_at=T0 + timedelta(minutes=30), scope="incoming",
                     status="Delivered", bounce=True)
        # opens: two on the first message (one a machine), one on the fourth; one click
        for message, minutes, machine, first in ((made[0], 10, False, True),
                                                 (made[0], 11, True, False),
                                                 (made[3], 70, False, True),
                                                 (made[0], 400, False, False)):
            db.add(OpenEvent(message_id=message.id, server_id=sid, stream_id=message.stream_id,
                             tag=message.tag, likely_machine=machine, first=first,
                             created_at=T0 + timedelta(minutes=minutes)))
        link = TrackedLink(message_id=made[1].id, token=engagement.new_link_token(),
                           url="https://example.org/")
        db.add(link)
        db.flush()
        db.add(ClickEvent(message_id=made[1].id, server_id=sid, link_id=link.id, url=link.url,
                          first=True, stream_id=outbound, tag="welcome", created_at=T0 + timedelta(minutes=20)))
        # delivery outcomes at known times
        outcomes = [(1, "MessageSent"), (2, "MessageSent"), (30, "MessageDelayed"),
                    (59, "MessageDeliveryFailed"), (60, "MessageHeld"), (61, "MessageDelayed"),
                    (125, "MessageSent"), (24 * 60 + 1, "MessageSent")]
        for minutes, event in outcomes:
            db.add(MessageEvent(message_id=made[0].id, server_id=sid, event=event,
                                uuid=str(uuid.uuid4()), details="seeded",
                                created_at=T0 + timedelta(minutes=minutes)))
    return plan, outcomes


def test_stats_over_a_range_match_the_messages(api, tenant):
    sid = server_id(tenant)
    plan, _ = _seed(sid)
    stats = _stats(api, tenant, **{"from": T0, "to": T0 + timedelta(hours=3)})
    assert stats["from"] == _iso(T0) and stats["to"] == _iso(T0 + timedelta(hours=3))
    assert stats["messages"] == len(plan)
    assert stats["by_status"] == dict(Counter(s for _, s, _, _ in plan))
    assert stats["held"] == 1 and stats["bounces"] == 1 and stats["incoming"] == 1
    assert (stats["opens"], stats["unique_opens"], stats["machine_opens"]) == (3, 2, 1)
    assert (stats["clicks"], stats["unique_clicks"], stats["machine_clicks"]) == (1, 1, 0)

    streams = {s["stream"]: s for s in stats["streams"]}
    assert streams["outbound"]["messages"] == 4 and streams["news"]["messages"] == 3
    assert streams["news"]["by_status"] == {"Held": 1, "SoftFail": 1, "Sent": 1}
    assert streams["outbound"]["opens"] == 2 and streams["news"]["unique_opens"] == 1
    tags = {t["tag"]: t for t in stats["tags"]}
    assert set(tags) == {"welcome", "digest"}
    assert tags["welcome"]["messages"] == 3 and tags["welcome"]["clicks"] == 1
    assert tags["digest"]["held"] == 1 and tags["digest"]["opens"] == 1

    # a narrower range: the first hour only
    first = _stats(api, tenant, **{"from": T0, "to": T0 + timedelta(hours=1)})
    assert first["messages"] == 3 and first["by_status"] == {"HardFail": 1, "Sent": 2}


def test_delivery_outcomes_bucket_by_bucket(api, tenant):
    sid = server_id(tenant)
    _, outcomes = _seed(sid)
    names = {"MessageSent": "sent", "MessageDelayed": "delayed",
             "MessageDeliveryFailed": "failed", "MessageHeld": "held"}

    def expected(step: timedelta, end: datetime):
        buckets = {}
        at = T0
        while at < end:
            buckets[_iso(at)] = dict.fromkeys(names.values(), 0)
            at += step
        for minutes, event in outcomes:
            when = T0 + timedelta(minutes=minutes)
            if when < end:
                start = T0 + step * ((when - T0) // step)
                buckets[_iso(start)][names[event]] += 1
        return buckets

    end = T0 + timedelta(hours=3)
    hourly = _stats(api, tenant, "/api/v2/server/stats/deliveries", **{"from": T0, "to": end})
    assert hourly["interval"] == "hour"  # the default for a short range
    assert {b.pop("start"): b for b in hourly["buckets"]} == expected(timedelta(hours=1), end)
    assert hourly["totals"] == {"sent": 3, "delayed": 2, "failed": 1, "held": 1}

    end = T0 + timedelta(days=3)
    daily = _stats(api, tenant, "/api/v2/server/stats/deliveries", **{"from": T0, "to": end})
    assert daily["interval"] == "day"
    assert {b.pop("start"): b for b in daily["buckets"]} == expected(timedelta(days=1), end)
    forced = _stats(api, tenant, "/api/v2/server/stats/deliveries", interval="hour",
                    **{"from": T0, "to": end})
    assert len(forced["buckets"]) == 72 and forced["totals"]["sent"] == 4


def test_stats_query_errors_name_the_field(api, tenant):
    key = tenant.api_key
    cases = [("/stats", {"from": "yesterday"}, "from"),
             ("/stats", {"from": _iso(T0), "to": _iso(T0 - timedelta(hours=1))}, "from"),
             ("/stats/deliveries", {"interval": "week"}, "interval"),
             ("/stats/deliveries", {"interval": "hour", "from": _iso(T0),
                                    "to": _iso(T0 + timedelta(days=365))}, "interval")]
    for path, params, field in cases:
        error = Api.error(api.get("/api/v2/server" + path, server_key=key, params=params),
                          422, "ValidationError")
        assert error["field"] == field
    Api.error(api.get("/api/v2/server/stats"), 401, "Unauthorized")


def test_recorded_opens_and_clicks_show_in_default_range_stats(api, tenant, stack, monkeypatch):
    monkeypatch.setenv("PUBLIC_URL", stack.base_url)
    sid = server_id(tenant)
    with all_tenants() as db:
        message = make_message(db, sid, tag="live")
        raw = engagement.prepare_outgoing(db, message, HTML_MESSAGE)
    clicks, pixels = tracking_urls(html_and_text(raw)[0])
    for _ in range(2):
        requests.get(pixels[0], timeout=10, headers={"User-Agent": "Thunderbird/128"})
    requests.get(clicks[0], allow_redirects=False, timeout=10)
    stats = _stats(api, tenant)
    assert (stats["messages"], stats["opens"], stats["unique_opens"], stats["clicks"]) == \
        (1, 2, 1, 1)
    assert stats["tags"][0]["tag"] == "live" and stats["tags"][0]["opens"] == 2


def _counter_snapshot(sid: int) -> dict:
    from chalicelib.db.models import StatCounter

    with all_tenants() as db:
        return {(c.period, c.bucket, c.metric, c.dim): c.count
                for c in db.query(StatCounter).filter_by(server_id=sid) if c.count}


def test_multi_day_ranges_combine_counters_and_edges(api, tenant):
    sid = server_id(tenant)
    plan, _ = _seed(sid)
    # partial day before, whole days, partial day after: counters in the middle, rows at edges
    stats = _stats(api, tenant, **{"from": T0 - timedelta(hours=11),
                                   "to": T0 + timedelta(days=2, hours=5)})
    assert stats["messages"] == len(plan) + 2  # plus the two just outside the 3-hour range
    assert stats["by_status"]["Sent"] == 5
    assert (stats["opens"], stats["unique_opens"], stats["machine_opens"]) == (4, 2, 1)
    aligned = _stats(api, tenant, **{"from": T0, "to": T0 + timedelta(days=1)})
    assert aligned["messages"] == len(plan) + 1 and aligned["incoming"] == 1
    streams = {s["stream"]: s for s in aligned["streams"]}
    assert set(streams) == {"outbound", "news", None}  # None: messages without a stream
    assert (streams[None]["messages"], streams[None]["bounces"]) == (1, 1)


def test_status_changes_move_counts_and_rebuild_agrees(api, tenant):
    from chalicelib.db import counters
    from chalicelib.db.models import Message

    sid = server_id(tenant)
    _seed(sid)
    with all_tenants() as db:
        pending = db.query(Message).filter_by(server_id=sid, status="Pending").one()
        db.commit()  # expires the row: the listener must still learn the old status
        pending.status = "Sent"
        soft = db.query(Message).filter_by(server_id=sid, status="SoftFail").one()
        soft.status, soft.tag = "HardFail", "retagged"
    day = {"from": T0, "to": T0 + timedelta(days=1)}
    stats = _stats(api, tenant, **day)
    assert stats["by_status"] == {"HardFail": 2, "Held": 1, "Sent": 5}
    tags = {t["tag"]: t for t in stats["tags"]}
    assert tags["retagged"]["by_status"] == {"HardFail": 1}
    assert tags["digest"]["messages"] == 1 and tags["welcome"]["by_status"] == {"Sent": 3}
    before = _counter_snapshot(sid)
    with all_tenants() as db:
        counters.rebuild(db, sid)
    assert _counter_snapshot(sid) == before


def test_engagement_over_time_bucket_by_bucket(api, tenant):
    """GET /stats/engagement: opens and clicks per hour (hourly counters, edges from rows)
    and per day, every bucket listed; the totals agree with GET /stats."""
    sid = server_id(tenant)
    _seed(sid)
    names = ("opens", "unique_opens", "machine_opens", "clicks", "unique_clicks",
             "machine_clicks")

    def row(*values):
        return dict(zip(names, values))
    path = "/api/v2/server/stats/engagement"
    hourly = _stats(api, tenant, path, **{"from": T0, "to": T0 + timedelta(hours=3)})
    assert hourly["interval"] == "hour"
    assert [(b["start"], {k: b[k] for k in names}) for b in hourly["buckets"]] == [
        (_iso(T0), row(2, 1, 1, 1, 1, 0)), (_iso(T0 + timedelta(hours=1)), row(1, 1, 0, 0, 0, 0)),
        (_iso(T0 + timedelta(hours=2)), row(0, 0, 0, 0, 0, 0))]
    assert hourly["totals"] == row(3, 2, 1, 1, 1, 0)

    # partial hours at both edges are counted from the rows, into their buckets
    edges = _stats(api, tenant, path, **{"from": T0 + timedelta(minutes=11),
                                         "to": T0 + timedelta(minutes=75)})
    assert [(b["start"], b["opens"], b["clicks"]) for b in edges["buckets"]] == [
        (_iso(T0), 1, 1), (_iso(T0 + timedelta(hours=1)), 1, 0)]
    assert edges["totals"]["machine_opens"] == 1
    # the same range's delivery outcomes land in their own hours too (they all went into
    # the first hour when no whole hour lay between the edges)
    outcomes = _stats(api, tenant, "/api/v2/server/stats/deliveries",
                      **{"from": T0 + timedelta(minutes=11), "to": T0 + timedelta(minutes=75)})
    assert [(b["delayed"], b["failed"], b["held"]) for b in outcomes["buckets"]] == \
        [(1, 1, 0), (1, 0, 1)]

    daily = _stats(api, tenant, path, **{"from": T0 - timedelta(hours=6),
                                         "to": T0 + timedelta(days=3)})
    assert daily["interval"] == "day" and len(daily["buckets"]) == 4
    assert [b["opens"] for b in daily["buckets"]] == [0, 4, 0, 0]
    assert daily["totals"] == row(4, 2, 1, 1, 1, 0)
    summary = _stats(api, tenant, **{"from": T0 - timedelta(hours=6),
                                     "to": T0 + timedelta(days=3)})
    assert {k: summary[k] for k in names} == daily["totals"]
    forced = _stats(api, tenant, path, interval="hour", **{"from": T0, "to": T0 + timedelta(days=1)})
    assert len(forced["buckets"]) == 24 and forced["buckets"][6]["opens"] == 1  # at +400 min
    error = Api.error(api.get("/api/v2/server" + "/stats/engagement", server_key=tenant.api_key,
                              params={"interval": "week"}), 422, "ValidationError")
    assert error["field"] == "interval"
