"""The rehearsal's two primitives (a test tool): ``check`` prints what was proved or stops the
run saying what was not; ``wait_for`` polls until something happens or stops the run."""
from __future__ import annotations

import time


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"rehearsal failed: no {what} within {timeout:.0f} s")


def check(condition, what: str) -> None:
    if not condition:
        raise SystemExit(f"rehearsal failed: {what}")
    print(f"  ok: {what}", flush=True)
