"""The one place that tells the time, so tests can move it (lockout expiry, token expiry).

All timestamps are naive UTC datetimes: SQLite has no time zones, and one convention for
both databases keeps comparisons simple.
"""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

_offset = timedelta(0)


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None) + _offset


def timestamp() -> float:
    return time.time() + _offset.total_seconds()


def advance(delta: timedelta) -> None:
    """Move the service's clock forward (tests only)."""
    global _offset
    _offset += delta


def reset() -> None:
    global _offset
    _offset = timedelta(0)
