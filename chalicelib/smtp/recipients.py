"""The inbound routes the gateway found for recent RCPT TO addresses, kept a few seconds.

Mail for an inbound route tends to come in runs to the same addresses, and each lookup is a
hand-off to the thread pool plus two queries (the domain return-path check, the route
match). Only a found route is kept, never a refusal (a route created now works at once), for
SMTP_ROUTE_CACHE_SECONDS; a route changed or removed reaches the gateway within that time
(routes live in the database the API writes, in another process in the cloud). Mail for a
route removed meanwhile cannot be stored (its row is gone): that DATA is answered 451 and the
addresses are forgotten, so the sender's retry meets the refusal.
"""
from __future__ import annotations

import time

from chalicelib.services.inbound.routes import RouteMatch

MAX_ENTRIES = 10_000


class RouteCache:
    def __init__(self) -> None:
        self._found: dict[str, tuple[float, RouteMatch]] = {}

    def get(self, address: str, seconds: float) -> RouteMatch | None:
        if seconds <= 0:
            return None
        entry = self._found.get(address.lower())
        if entry is None:
            return None
        stored_at, match = entry
        if time.monotonic() - stored_at > seconds:
            self._found.pop(address.lower(), None)
            return None
        # The stored match names the address as first written; answer with this one.
        return match if match.address == address else RouteMatch(
            match.route_id, match.server_id, match.mode, address)

    def put(self, address: str, match: RouteMatch, seconds: float) -> None:
        if seconds <= 0:
            return
        if len(self._found) >= MAX_ENTRIES:
            self._found.clear()
        self._found[address.lower()] = (time.monotonic(), match)

    def forget(self, addresses) -> None:
        for address in addresses:
            self._found.pop(address.lower(), None)
