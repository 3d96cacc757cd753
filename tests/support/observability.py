"""Helpers for observability tests: the service's log lines captured as JSON (``Lines``, behind
the ``logs`` fixture of tests/conftest.py) and the metrics endpoint read as numbers."""
from __future__ import annotations

import io
import json

import requests

from tests.support import wait_for


def metrics(api) -> dict[str, float]:
    response = requests.get(api.base_url + "/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    values = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


class Lines:
    def __init__(self, buffer: io.StringIO):
        self.buffer = buffer

    def text(self) -> str:
        return self.buffer.getvalue()

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.text().splitlines() if line.startswith("{")]

    def find(self, event: str, **fields) -> list[dict]:
        return [r for r in self.records() if r.get("event") == event
                and all(r.get(k) == v for k, v in fields.items())]

    def wait(self, event: str, **fields) -> dict:
        return wait_for(lambda: (found := self.find(event, **fields)) and found[-1], 20,
                        message=f"a {event} line with {fields}")
