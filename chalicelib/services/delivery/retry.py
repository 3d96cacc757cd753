"""The retry schedule of outgoing deliveries.

An outgoing message gets up to DELIVERY_MAX_ATTEMPTS attempts (default 18). After a temporary
failure of attempt ``n`` the next attempt waits ``delay(n)``: the n-th entry of the schedule
(minutes), the last entry repeating when the schedule is shorter than needed. The built-in
schedule grows from one minute to eight hours and spans about two days over 18 attempts,
like Postal's. DELIVERY_RETRY_SCHEDULE replaces it ("1,5,30,120" in minutes). Every delay is
multiplied by TIME_SCALE.
"""
from __future__ import annotations

from chalicelib.config import Settings, get_settings

# Minutes to wait after attempt 1, 2, ... 17 (sum 2973 min, about 49.5 hours).
DEFAULT_SCHEDULE_MINUTES: tuple[float, ...] = (
    1, 2, 5, 10, 15, 30, 60, 90, 120, 180, 240, 300, 300, 360, 360, 420, 480,
)


class ScheduleError(ValueError):
    pass


def parse_schedule(raw: str) -> tuple[float, ...]:
    if not raw.strip():
        return DEFAULT_SCHEDULE_MINUTES
    values = []
    for part in raw.split(","):
        try:
            value = float(part.strip())
        except ValueError:
            raise ScheduleError(
                f"DELIVERY_RETRY_SCHEDULE: {part.strip()!r} is not a number of minutes") from None
        if value < 0:
            raise ScheduleError("DELIVERY_RETRY_SCHEDULE: delays cannot be negative")
        values.append(value)
    return tuple(values)


def schedule(settings: Settings | None = None) -> tuple[float, ...]:
    settings = settings or get_settings()
    return parse_schedule(settings.delivery_retry_schedule)


def max_attempts(settings: Settings | None = None) -> int:
    return max(1, (settings or get_settings()).delivery_max_attempts)


def delay_seconds(attempt: int, settings: Settings | None = None) -> float | None:
    """Seconds (after TIME_SCALE) to wait after failed attempt number ``attempt`` (1-based),
    or None when that was the last attempt allowed."""
    settings = settings or get_settings()
    if attempt >= max_attempts(settings):
        return None
    minutes = schedule(settings)
    index = min(max(attempt, 1), len(minutes)) - 1
    return settings.scaled(minutes[index] * 60.0)
