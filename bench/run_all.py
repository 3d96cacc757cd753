"""Run every bench in turn and print their tables (``make bench``).

Each bench measures its own baseline in the same run and prints ratios; run them on a quiet
machine, one at a time (this script does), and paste the tables into bench/RESULTS.md.
BENCH_DATABASE_URL picks the PostgreSQL database (default: the machine's `test` database,
which the benches reset)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

BENCHES = [
    ("foundation", ["bench_foundation.py"]),
    ("package", ["bench_package.py"]),
    ("templates", ["bench_templates.py"]),
    ("dkim", ["bench_dkim.py"]),
    ("sending", ["bench_sending.py"]),
    ("webhooks", ["bench_webhooks.py"]),
    ("smtp", ["bench_smtp.py"]),
    ("stats", ["bench_stats.py"]),
    ("sending_controls", ["bench_sending_controls.py"]),
    ("pipeline", ["bench_pipeline.py"]),
    ("pipeline_lambda", ["bench_pipeline_lambda.py"]),
    ("http", ["bench_http.py"]),
    ("rls", ["bench_rls.py"]),
    ("reputation", ["bench_reputation.py"]),
    ("latency", ["bench_latency.py", "--postfix"]),
]


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    only = set(sys.argv[1:])
    failed = []
    for name, argv in BENCHES:
        if only and name not in only:
            continue
        print(f"\n## {name}\n", flush=True)
        started = time.monotonic()
        result = subprocess.run([sys.executable, os.path.join(here, argv[0]), *argv[1:]],
                                cwd=os.path.dirname(here))
        print(f"\n({name}: {time.monotonic() - started:.0f} s)", flush=True)
        if result.returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
