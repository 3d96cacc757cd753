"""Per-key API throttling (API_RATE_LIMIT_*): a token bucket per server API key in the
database, so every process draws from one bucket; 429 RateLimited with Retry-After."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from chalicelib import clock
from tests.support import Api, make_tenant

S = "/api/v2/server"


@pytest.fixture
def limited(monkeypatch):
    monkeypatch.setenv("API_RATE_LIMIT_PER_SECOND", "0.5")
    monkeypatch.setenv("API_RATE_LIMIT_BURST", "3")


def _streams(api, key):
    return api.get(S + "/streams", server_key=key)


def test_a_key_gets_its_burst_then_429_then_tokens_back_over_time(api, tenant, limited):
    assert [_streams(api, tenant.api_key).status_code for _ in range(3)] == [200] * 3
    refused = _streams(api, tenant.api_key)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "RateLimited" and "batch" in error["message"]
    assert int(refused.headers["Retry-After"]) == 2  # one token at 0.5 a second

    other = make_tenant(api)  # another key has its own bucket
    assert _streams(api, other.api_key).status_code == 200

    clock.advance(timedelta(seconds=2.1))
    assert _streams(api, tenant.api_key).status_code == 200
    assert _streams(api, tenant.api_key).status_code == 429
    # A refused request spends nothing: after another 2 s there is a token again.
    clock.advance(timedelta(seconds=2.1))
    assert _streams(api, tenant.api_key).status_code == 200


def test_the_bucket_never_holds_more_than_the_burst(api, tenant, limited):
    _streams(api, tenant.api_key)
    clock.advance(timedelta(hours=1))
    assert [_streams(api, tenant.api_key).status_code for _ in range(4)] == [200] * 3 + [429]


def test_parallel_requests_share_one_bucket(api, tenant, monkeypatch):
    monkeypatch.setenv("API_RATE_LIMIT_PER_SECOND", "0.001")
    monkeypatch.setenv("API_RATE_LIMIT_BURST", "5")
    statuses: list[int] = []
    lock = threading.Lock()

    def call():
        status = _streams(Api(api.base_url, api.admin_key), tenant.api_key).status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=call) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] * 5 + [429] * 7


def test_off_by_default(api, tenant, monkeypatch):
    monkeypatch.delenv("API_RATE_LIMIT_PER_SECOND", raising=False)
    assert {_streams(api, tenant.api_key).status_code for _ in range(8)} == {200}
