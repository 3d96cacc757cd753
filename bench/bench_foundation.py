"""Foundation figures: the cold import time of app.py (what a Lambda cold start pays before
the first request) and the cost of one authenticated management request through the real
HTTP stack.

Baselines in the same run: a bare interpreter start, and GET /health (same server, no
authentication, no database) plus the same lookup done with bare SQLAlchemy.

Run: .venv/bin/python bench/bench_foundation.py   (BENCH_DATABASE_URL to pick the database;
default: the machine's PostgreSQL)"""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import TABLE_HEAD, bench_database_url, prepare_database, rate, row  # noqa: E402


def cold_import() -> tuple[float, float]:
    def best_of(code: str) -> float:
        times = []
        for _ in range(5):
            out = subprocess.run([sys.executable, "-c",
                                  "import time; t=time.perf_counter(); " + code +
                                  "; print(time.perf_counter()-t)"],
                                 cwd=ROOT, capture_output=True, text=True, check=True)
            times.append(float(out.stdout.strip().splitlines()[-1]))
        return min(times)

    return best_of("import app"), best_of("import json")


def management_request() -> tuple[float, float, float]:
    import requests
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    url = bench_database_url()
    prepare_database(url, ADMIN_API_KEY="bench-admin-key-0123456789")
    from app import app
    from chalicelib.db.models import Organization
    from chalicelib.local.stack import LocalStack
    from tests.support import free_port

    stack = LocalStack(app, http_port=0, smtp_port=free_port(), sweep_interval=60).start()
    try:
        http = requests.Session()
        headers = {"X-Admin-API-Key": "bench-admin-key-0123456789"}
        http.post(stack.base_url + "/api/v2/admin/organizations", json={"name": "Bench",
                                                                        "permalink": "bench"},
                  headers=headers).raise_for_status()
        show = stack.base_url + "/api/v2/admin/organizations/bench"
        ours = rate(lambda: http.get(show, headers=headers).raise_for_status())
        health = rate(lambda: http.get(stack.base_url + "/health").raise_for_status())
        engine = create_engine(url)

        def bare() -> None:
            with Session(engine) as session:
                session.scalar(select(Organization).where(Organization.permalink == "bench"))

        bare_rate = rate(bare)
        engine.dispose()
    finally:
        stack.stop()
    return ours, health, bare_rate


def main() -> None:
    app_import, json_import = cold_import()
    ours, health, bare = management_request()
    print(TABLE_HEAD)
    print(row("cold import of app.py", f"{app_import * 1000:.0f} ms",
              f"{json_import * 1000:.1f} ms (import json)", app_import / max(json_import, 1e-9),
              "< 400 ms absolute"))
    print(row("authenticated GET organization (req/s)", f"{ours:.0f}/s",
              f"{health:.0f}/s (GET /health)", health / ours, "informational"))
    print(row("same lookup, bare SQLAlchemy (req/s)", f"{ours:.0f}/s", f"{bare:.0f}/s",
              bare / ours, "informational"))


if __name__ == "__main__":
    main()
