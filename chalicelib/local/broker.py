"""The queue `make run`'s processes share: one ``queues.Schedule`` in the supervisor (with
``Tally``, their metric counts), served over a loopback socket (multiprocessing's manager
protocol, HMAC-authenticated with a key only the supervisor's children get), and
``BrokerPort``, the queue port of every child.

Wake-ups are only wake-ups (the rows are the truth, db/claims.py): the ones a worker took and
then died with are lost, and the sweeper wakes their rows again once the dead worker's claims
expire (CLAIM_TIMEOUT_SECONDS). So the broker keeps nothing on disk and acknowledges nothing.
"""
from __future__ import annotations

import json
import os
import secrets
import threading
from multiprocessing.managers import BaseManager

from chalicelib import queues

# How a child learns where the broker is: "host:port:authkey-hex", in its environment (not on
# its command line, which every local user can read).
BROKER_ENV = "EMAIL_SERVICE_BROKER"


class _Server(BaseManager):
    pass


class _Client(BaseManager):
    pass


_Client.register("schedule")
_Client.register("tally")


class Tally:
    """Every process's metric counts added up (observability.share_counters), so GET /metrics
    in any HTTP process answers the whole stack's."""

    def __init__(self):
        self._counts: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, new: dict[str, float]) -> dict[str, float]:
        with self._lock:
            for name, value in new.items():
                self._counts[name] = self._counts.get(name, 0) + value
            return dict(self._counts)


class Broker:
    """Serves ``schedule`` and ``tally`` to the children until ``stop``."""

    def __init__(self, schedule: queues.Schedule, tally: Tally, host: str = "127.0.0.1"):
        self.schedule = schedule
        self.tally = tally
        self._authkey = secrets.token_bytes(32)
        _Server.register("schedule", callable=lambda: schedule)
        _Server.register("tally", callable=lambda: tally)
        self._server = _Server(address=(host, 0), authkey=self._authkey).get_server()
        self._thread = threading.Thread(target=self._server.serve_forever, name="queue-broker",
                                        daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.address
        return f"{host}:{port}:{self._authkey.hex()}"

    def start(self) -> "Broker":
        self._thread.start()
        return self

    def stop(self) -> None:
        stop_event = getattr(self._server, "stop_event", None)
        if stop_event is not None:
            stop_event.set()
        self._thread.join(timeout=5)


class BrokerPort:
    """A child's queue port: ``send``/``send_many`` (what the API, the gateway and the
    workers enqueue) and ``take`` (what worker threads wait on). Each thread gets its own
    connection (multiprocessing's proxies keep one per thread)."""

    def __init__(self, address: str | None = None):
        host, port, key = (address or os.environ[BROKER_ENV]).rsplit(":", 2)
        manager = _Client(address=(host, int(port)), authkey=bytes.fromhex(key))
        manager.connect()
        self._schedule = manager.schedule()
        self._tally = manager.tally()

    def send(self, queue: str, body: dict, delay_seconds: float = 0) -> None:
        self._schedule.push_many(queue, [json.dumps(body)], [delay_seconds])

    def send_many(self, queue: str, bodies: list[dict],
                  delays: list[float] | None = None) -> None:
        self._schedule.push_many(queue, [json.dumps(body) for body in bodies], delays)

    def take(self, limit: int, timeout: float,
             limits: dict[str, int] | None = None) -> tuple[str, list[str]] | None:
        return self._schedule.take(limit, timeout, limits=limits)

    def add_counts(self, new: dict[str, float]) -> dict[str, float]:
        """observability.share_counters' exchange: adds ``new``, returns the totals."""
        return self._tally.add(new)
