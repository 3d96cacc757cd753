"""bench/bench_smtp.py in a tiny mode, so it cannot rot: the in-process gateway (with its
committer process) and a bare aiosmtpd on a PostgreSQL database of its own, one short round,
its table printed. Figures are not checked (tests never assert on time)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import TEST_DATABASE_URL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                       reason="the SMTP bench measures PostgreSQL"),
]


def _ensure_database(url, name: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT",
                          poolclass=NullPool)
    try:
        with admin.connect() as conn:
            if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                {"n": name}).scalar():
                conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()


def test_the_smtp_bench_runs_both_servers_and_prints_its_ratios():
    url = make_url(TEST_DATABASE_URL)
    # A database of its own: the bench drops and re-creates its public schema.
    bench_url = url.set(database=f"{url.database}_bench_smtp").render_as_string(
        hide_password=False)
    _ensure_database(url, f"{url.database}_bench_smtp")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "DATABASE_OWNER_URL", "SIGNING_KEY_PATH")}
    env["BENCH_DATABASE_URL"] = bench_url
    done = subprocess.run([sys.executable, "bench/bench_smtp.py", "--seconds", "1",
                           "--connections", "4", "--runs"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "SMTP_COMMIT_PROCESS=True" in out, out
    for measure in ("| submission accepted/s |", "| gateway CPU ms per submission",
                    "| submission transactions per message |",
                    "| inbound (accept route) accepted/s"):
        assert measure in out, out
    assert "machine" in done.stderr and "busy" in done.stderr  # --runs: one line a run
