"""Start and stop the local stack in one process: migrations, the seeded admin key, the
installation key, the HTTP API, the SMTP gateway, queue workers and the sweeper. `make run`
with several processes uses ``prepare`` and ``Housekeeping`` from here (local/supervisor.py)."""
from __future__ import annotations

import logging
import os
import threading
import time

from chalicelib import queues
from chalicelib.config import Settings, get_settings, local_url
from chalicelib.db import migrate, session_scope, tenancy
from chalicelib.local.http_server import HttpServer
from chalicelib.db.models import Message, WebhookRequest
from chalicelib.services.accounts import admin_keys
from chalicelib.db import claims
from chalicelib.services.security import keys
from chalicelib.smtp.gateway import Gateway
from chalicelib.workers import dispatch, retention, sweeper
from chalicelib.workers.registry import load_workers

log = logging.getLogger(__name__)


def prepare(settings: Settings) -> list[str]:
    """What every start needs: the schema at head (and on PostgreSQL the service's role, when
    DATABASE_OWNER_URL is set), the installation key, the seeded key. Returns the banner's
    notes: a service role not bound by row-level security, keys seeded from an earlier
    ADMIN_API_KEY that were revoked."""
    notes = migrate.prepare(settings)
    keys.signing_key()
    # The in-process queue died with the last process: every tenant's marks go.
    with session_scope() as db, tenancy.across_tenants(db, "local-start"):
        claims.forget_wakeups(db, Message, WebhookRequest)
    if settings.admin_api_key:
        with session_scope() as db:
            _, revoked = admin_keys.seed_key(db, settings.admin_api_key)
            notes += [f"ADMIN_API_KEY changed: the previously seeded admin key {k.key_hint} "
                     "was revoked" for k in revoked]
    return notes


class Housekeeping:
    """The sweeper (with retention) and the periodic domain checks, in threads: ONE per
    stack, whatever the number of processes (`make run`'s supervisor runs them)."""

    def __init__(self, settings: Settings, sweep_interval: float | None = None):
        self.settings = settings
        self.sweep_interval = settings.sweep_interval_seconds if sweep_interval is None \
            else sweep_interval
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._checker: threading.Thread | None = None

    def start(self) -> None:
        self._sweeper = threading.Thread(target=self._sweep_loop, name="sweeper", daemon=True)
        self._sweeper.start()
        self._checker = threading.Thread(target=self._domain_check_loop, name="domain-checks",
                                         daemon=True)
        self._checker.start()

    def _domain_check_loop(self) -> None:
        # The periodic DNS re-check of verified domains and sending addresses (AWS: an hourly
        # schedule), in its own thread: slow DNS must not hold up the sweeper. Same cadence
        # as retention.
        from chalicelib.workers import dns_checks

        while not self._stop.wait(self.settings.retention_interval_seconds):
            dns_checks.run()  # logs its own failures

    def _sweep_loop(self) -> None:
        # First sweep at start: wake-ups held in memory died with the previous process.
        grace = 0.0
        next_prune = time.monotonic()
        while not self._stop.is_set():
            try:
                sweeper.sweep(grace_seconds=grace)
                if time.monotonic() >= next_prune:
                    retention.run()
                    next_prune = time.monotonic() + self.settings.retention_interval_seconds
            except Exception:  # noqa: BLE001
                log.exception("sweep failed")
            grace = max(1.0, self.sweep_interval)
            self._stop.wait(self.sweep_interval)

    def stop(self) -> None:
        self._stop.set()
        if self._sweeper:
            self._sweeper.join(timeout=5)


class LocalStack:
    """Everything in this process (the test suite; `make run` with WORKER_PROCESSES=0 and one
    HTTP and one SMTP process)."""

    def __init__(self, app, *, http_port: int | None = None, smtp_port: int | None = None,
                 workers: int = 4, sweep_interval: float | None = None):
        settings = get_settings()
        self.settings = settings
        self.app = app
        self.http_port = settings.port if http_port is None else http_port
        self.smtp_port = settings.smtp_port if smtp_port is None else smtp_port
        self.port = queues.LocalPort(workers)
        self.housekeeping = Housekeeping(settings, sweep_interval)
        self.http: HttpServer | None = None
        self.gateway: Gateway | None = None
        self.notes: list[str] = []

    @property
    def sweep_interval(self) -> float:
        return self.housekeeping.sweep_interval

    @property
    def base_url(self) -> str:
        return local_url(self.settings.host, self.http_port)

    def start(self) -> "LocalStack":
        self.notes = prepare(self.settings)
        load_workers()
        queues.set_port(self.port)
        self.port.start(dispatch.dispatch, dispatch.dispatch_batch)
        self.http = HttpServer(self.app, self.settings.host, self.http_port)
        self.http_port = self.http.port
        if self.http_port != self.settings.port and not self.settings.public_url:
            # Bound to another port than PORT (port 0 in tests): links for people and
            # tracking must name the address really listening, not PORT's.
            os.environ["PUBLIC_URL"] = self.base_url
        self.http.start()
        self.gateway = Gateway(self.settings.host, self.smtp_port)
        self.gateway.start()
        self.smtp_port = self.gateway.port
        self.housekeeping.start()
        return self

    def stop(self) -> None:
        self.housekeeping.stop()
        if self.gateway:
            self.gateway.stop()
        if self.http:
            self.http.stop()
        self.port.stop()
        queues.set_port(None)
