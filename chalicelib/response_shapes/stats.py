"""Shapes of the statistics answers (/api/v2/server/stats…): message and engagement counters
for a range, per stream and per tag, and outcome and engagement counts per hour or day."""
from datetime import datetime
from typing import Annotated

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from chalicelib.response_shapes import record


@record
class Engagement(TypedDict):
    opens: int
    unique_opens: int
    machine_opens: int
    clicks: int
    unique_clicks: int
    machine_clicks: int


@record
class Counts(Engagement):
    """Counters of messages and engagement (services/stats.COUNTERS)."""

    messages: int
    by_status: dict[str, int]
    held: int
    bounces: int
    incoming: int
    bounce_categories: NotRequired[dict[str, int]]
    failed_attempt_categories: NotRequired[dict[str, int]]
    complaints: NotRequired[int]


@record
class StreamCounts(Counts):
    stream: str | None


@record
class TagCounts(Counts):
    tag: str


@record
class Stats(Counts):
    """GET /stats: the range's counters, and the same per stream and per tag."""

    from_: Annotated[datetime, Field(alias="from")]
    to: datetime
    streams: list[StreamCounts]
    tags: list[TagCounts]


@record
class Outcomes(TypedDict):
    sent: int
    delayed: int
    failed: int
    held: int


@record
class Bucket(Outcomes):
    start: datetime


@record
class DeliveryStats(TypedDict):
    """GET /stats/deliveries: outcome counts per hour or day."""

    from_: Annotated[datetime, Field(alias="from")]
    to: datetime
    interval: str
    totals: Outcomes
    buckets: list[Bucket]


@record
class EngagementBucket(Engagement):
    start: datetime


@record
class EngagementStats(TypedDict):
    """GET /stats/engagement: opens and clicks per hour or day."""

    from_: Annotated[datetime, Field(alias="from")]
    to: datetime
    interval: str
    totals: Engagement
    buckets: list[EngagementBucket]


@record
class StatsAnswer(TypedDict):
    stats: Stats


@record
class DeliveryStatsAnswer(TypedDict):
    stats: DeliveryStats


@record
class EngagementStatsAnswer(TypedDict):
    stats: EngagementStats
