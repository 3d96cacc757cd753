"""Test fixtures. The suite runs on PostgreSQL when TEST_DATABASE_URL is set (CI does), on a
fresh SQLite file otherwise. The stack runs in-process on real sockets: the HTTP API, the SMTP
gateway, the in-process queue and the sweeper, exactly as ``make run`` starts them."""
from __future__ import annotations

import os
import sys
import tempfile
import time

import pytest

_tmp = tempfile.mkdtemp(prefix="email-service-tests-")
# The owner of the tables (migrations; the suite's own scratch tables). On PostgreSQL the
# service runs as a role of its own, bound by row-level security, which the suite creates
# through the migrate step (db/roles.py): APP_DATABASE_URL.
TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL") or f"sqlite:///{_tmp}/test.db"


def _worker_database(url: str) -> str:
    """Under pytest-xdist (``-n N``, as CI runs the suite) each worker process gets a
    PostgreSQL database of its own beside the one named, ``<name>_<worker>`` (created when
    missing): every test assumes it has the database to itself. Without xdist: ``url``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not url.startswith("postgresql"):
        return url
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    parsed = make_url(url)
    name = f"{parsed.database}_{worker}"
    admin = create_engine(parsed, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return parsed.set(database=name).render_as_string(hide_password=False)


TEST_DATABASE_URL = _worker_database(TEST_DATABASE_URL)
TEST_ADMIN_KEY = "test-admin-key-0123456789abcdef"


def app_database_url(url: str) -> str:
    """The service's role: named after the database, since roles are shared by every
    database of the cluster (other suites' databases included)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return url
    return parsed.set(username=f"{parsed.database}_app", password=f"{parsed.database}-app-pw") \
        .render_as_string(hide_password=False)


APP_DATABASE_URL = app_database_url(TEST_DATABASE_URL)

# Settings are read lazily, so setting the environment before the first get_settings() is enough.
os.environ.update({
    "DATABASE_URL": APP_DATABASE_URL,
    "DATABASE_OWNER_URL": TEST_DATABASE_URL if APP_DATABASE_URL != TEST_DATABASE_URL else "",
    "SIGNING_KEY_PATH": os.path.join(_tmp, "signing_key.pem"),
    "ADMIN_API_KEY": TEST_ADMIN_KEY,
    "WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true",   # receivers in tests live on loopback
    "SMTP_HOSTNAME": "mx.service.test",
    "QUEUE_BACKEND": "local",
    "CONTENT_STORE": "file",  # tests/content run the S3 adapter on moto too
    "CONTENT_STORE_DIR": os.path.join(_tmp, "content"),
    # Test tenants use the documentation names (example.com ...), refused otherwise.
    "RESERVED_DOMAINS_ALLOWED": "example.com,example.net,example.org,example",
    # A worker's SMTP session closes (and its connection slot is given back) when the worker
    # is done: tests count slots and sessions per run. The tests of the connection cache
    # (tests/delivery/test_concurrency.py) turn it on.
    "DELIVERY_SESSION_IDLE_SECONDS": "0",
})
for _name in ("CONTENT_BUCKET", "CONTENT_S3_ENDPOINT_URL", "TIME_SCALE", "DELIVERY_RELAY", "ENCRYPTION_KEY", "PORT", "SMTP_PORT",
              "AUTH_ALLOW_REGISTRATION"):
    os.environ.pop(_name, None)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import io  # noqa: E402

from tests.dns_helpers import dns_zone  # noqa: E402, F401  (the fixture, for every test)
from tests.mx import ScriptedMX  # noqa: E402
from tests.support import Api, free_port, make_tenant, unique  # noqa: E402
from tests.support.observability import Lines  # noqa: E402


def _reset_database(url: str) -> None:
    from sqlalchemy import create_engine, text

    if url.startswith("postgresql"):
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()


@pytest.fixture(scope="session")
def database():
    """The schema, migrated from empty to head once per test session, and the service's
    role granted (the migrate step's own code). Yields the owner's URL."""
    from chalicelib.db import migrate

    _reset_database(TEST_DATABASE_URL)
    migrate.prepare()
    yield TEST_DATABASE_URL


@pytest.fixture
def db(database):
    """A session of the service's role for tests that set up or inspect rows of any tenant
    (committed on success): it acts across tenants, as tests/support.all_tenants does."""
    from tests.support import all_tenants

    with all_tenants() as session:
        yield session


@pytest.fixture(scope="session")
def stack(database):
    from app import app
    from chalicelib.local.stack import LocalStack

    from chalicelib.api import framework
    from tests.response_check import ResponseChecker

    # Every success answer is checked against the OpenAPI document (tests/response_check.py).
    framework.response_check = ResponseChecker()
    local = LocalStack(app, http_port=0, smtp_port=free_port(), sweep_interval=0.5).start()
    yield local
    local.stop()
    framework.response_check = None


@pytest.fixture
def api(stack) -> Api:
    return Api(stack.base_url, TEST_ADMIN_KEY)


@pytest.fixture
def tenant(api):
    """A fresh organization with a server, a verified domain, an API and an SMTP credential."""
    return make_tenant(api)


@pytest.fixture
def clear_smtp_auth_failures(database):
    """SMTP AUTH failures are counted per client address in the database, shared by every
    gateway; all test clients are 127.0.0.1, so each SMTP test starts from none."""
    from sqlalchemy import delete

    from chalicelib.db import session_scope
    from chalicelib.db.models import SmtpAuthFailure

    with session_scope() as session:
        session.execute(delete(SmtpAuthFailure))


def _park_earlier_mail(settle_seconds: float = 1.0) -> None:
    """Outgoing mail of earlier tests that still waits on an attempt is parked (no next
    attempt: never claimed again), so it is not delivered to the next test's MX, where it
    would take an entry of that test's script (DELIVERY_RELAY names the MX at each attempt).
    What is in flight now (claimed in the last seconds) may end in a retry: parked again
    once it has finished, waiting at most ``settle_seconds``."""
    from datetime import timedelta

    from sqlalchemy import exists, select, update

    from chalicelib import clock, statuses
    from chalicelib.db.models import Message
    from tests.support import all_tenants

    waiting = (Message.scope == "outgoing", Message.status.in_(statuses.DELIVERABLE),
               Message.next_attempt_at.is_not(None))
    deadline = time.monotonic() + settle_seconds
    while True:
        with all_tenants() as db:
            db.execute(update(Message).where(*waiting, Message.locked_by.is_(None))
                       .values(next_attempt_at=None))
            busy = db.scalar(select(exists().where(
                Message.scope == "outgoing", Message.locked_by.is_not(None),
                Message.locked_at > clock.now() - timedelta(seconds=5))))
        if not busy or time.monotonic() > deadline:
            return
        time.sleep(0.05)


@pytest.fixture
def mx(monkeypatch, stack):
    """A scripted MX on loopback that the running stack delivers to, with fast retries;
    earlier tests' mail still waiting on an attempt is parked first (``_park_earlier_mail``)."""
    from tests.mx import ScriptedMX

    _park_earlier_mail()
    server = ScriptedMX().start()
    monkeypatch.setenv("DELIVERY_RELAY", server.relay)
    monkeypatch.setenv("TIME_SCALE", "0.0001")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _reset_clock():
    from chalicelib import clock, dns_lookup

    from chalicelib.services.delivery import concurrency

    clock.reset()
    dns_lookup.forget_cached()  # a zone of an earlier test on a reused port is not this one's
    concurrency.forget_round_trips()  # an earlier test's slow MX is not this one's
    yield
    clock.reset()


@pytest.fixture
def logs(monkeypatch):
    """The service's log lines, as JSON, captured for the test (``Lines``)."""
    from chalicelib import observability

    monkeypatch.setenv("LOG_FORMAT", "json")
    buffer = io.StringIO()
    restore = observability.capture(buffer)
    yield Lines(buffer)
    restore()


@pytest.fixture
def mx_zone(dns_zone, monkeypatch):  # noqa: F811
    """A receiving MX on loopback that the zone names as the MX of ``mx_zone.domain``, and
    delivery to MX hosts (no relay), on the MX's port."""
    server = ScriptedMX().start()
    monkeypatch.delenv("DELIVERY_RELAY", raising=False)
    monkeypatch.setenv("DELIVERY_MX_PORT", str(server.port))
    monkeypatch.setenv("TIME_SCALE", "0.0001")
    domain = f"{unique('dest')}.example"
    dns_zone.zone.update({(f"{domain}.", "MX"): [(10, f"mx.{domain}.")],
                          (f"mx.{domain}.", "A"): ["127.0.0.1"]})
    server.domain = domain
    server.dns = dns_zone
    yield server
    server.stop()
