"""bench/bench_pipeline.py in a tiny mode, so it cannot rot: it starts `make run`'s process
(python -m chalicelib.local) on a PostgreSQL database of its own, sends a few messages
through it and through the reference loop, and prints its table. Figures are not checked
(tests never assert on time); that every message arrived, signed, is (the bench fails
otherwise)."""
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
                       reason="the pipeline bench measures PostgreSQL"),
]


def test_the_pipeline_bench_runs_make_run_and_prints_its_ratios():
    url = make_url(TEST_DATABASE_URL)
    # A database of its own: the bench drops and re-creates its public schema.
    bench_url = url.set(database=f"{url.database}_bench_pipeline").render_as_string(
        hide_password=False)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "DATABASE_OWNER_URL", "SIGNING_KEY_PATH")}
    env["BENCH_DATABASE_URL"] = bench_url
    done = subprocess.run([sys.executable, "bench/bench_pipeline.py", "--messages", "20",
                           "--worker-processes", "default,0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("| reference loop") for line in lines), done.stdout
    for setting in ("default", "0"):
        assert any(line.startswith(f"| make run, WORKER_PROCESSES={setting} |")
                   for line in lines), done.stdout
        assert any(line.startswith(f"- WORKER_PROCESSES={setting}: measured ") and
                   "chalicelib.local" in line for line in lines), done.stdout
