"""Idempotency-Key on the send endpoints: replays, reuse with another body, concurrency (8
duplicates at once create one message, on PostgreSQL and SQLite), expiry, and the 409 of a
duplicate that waited too long for the first request."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests

from chalicelib import clock
from tests.conftest import TEST_DATABASE_URL
from tests.support.sending import rcpt
from tests.support import Api, unique

SERVER = "/api/v2/server"


def body(tenant, **fields) -> dict:
    return {"from": f"app@{tenant.domain}", "to": [rcpt()], "subject": "Hi",
            "text_body": "Hello", **fields}


def post(api, tenant, path, payload, key):
    headers = {"Idempotency-Key": key} if key is not None else {}
    return api.post(f"{SERVER}{path}", payload, server_key=tenant.api_key, headers=headers)


def count(api, tenant) -> int:
    return Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key))[
        "pagination"]["total"]


def test_same_key_same_body_replays_the_first_answer_and_creates_nothing(api, tenant):
    key, payload = unique("key"), body(tenant)
    first = post(api, tenant, "/messages", payload, key)
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    # The same JSON with other spacing and key order is the same request.
    again = api.request("POST", f"{SERVER}/messages",
                        data=__import__("json").dumps(dict(reversed(list(payload.items())))),
                        headers={"Idempotency-Key": key, "X-Server-API-Key": tenant.api_key})
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["data"] == first.json()["data"]
    assert count(api, tenant) == 1
    # Without the key, the same body sends again.
    assert post(api, tenant, "/messages", payload, None).status_code == 201
    assert count(api, tenant) == 2


def test_same_key_with_another_body_or_path_is_422_idempotency_key_reused(api, tenant):
    key = unique("key")
    Api.data(post(api, tenant, "/messages", body(tenant), key), 201)
    error = Api.error(post(api, tenant, "/messages", body(tenant), key), 422,
                      "IdempotencyKeyReused")
    assert error["field"] == "Idempotency-Key"
    Api.error(post(api, tenant, "/messages/batch", {"messages": [body(tenant)]}, key), 422,
              "IdempotencyKeyReused")
    assert count(api, tenant) == 1


def test_keys_are_scoped_to_the_server(api, tenant):
    from tests.support import make_tenant

    other = make_tenant(api)
    key = unique("key")
    Api.data(post(api, tenant, "/messages", body(tenant), key), 201)
    Api.data(post(api, other, "/messages", body(other), key), 201)  # not a reuse
    assert count(api, tenant) == 1 and count(api, other) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\tin"])
def test_a_malformed_key_is_a_422(api, tenant, key):
    error = Api.error(post(api, tenant, "/messages", body(tenant), key), 422, "ValidationError")
    assert error["field"] == "Idempotency-Key"
    assert count(api, tenant) == 0


def test_a_failed_request_keeps_nothing_so_the_key_can_be_retried(api, tenant):
    key = unique("key")
    bad = body(tenant, **{"from": "app@unverified.example"})
    Api.error(post(api, tenant, "/messages", bad, key), 422, "ValidationError")
    # The fixed request under the same key runs (it is not a reuse: nothing was kept).
    Api.data(post(api, tenant, "/messages", body(tenant), key), 201)
    assert count(api, tenant) == 1


def test_batch_and_template_sends_honour_the_key(api, tenant):
    Api.data(api.post(f"{SERVER}/templates", {"name": "T", "permalink": "t", "subject": "Hi",
                                              "text_body": "{{x}}"}, server_key=tenant.api_key),
             201)
    cases = [("/messages/batch", {"messages": [body(tenant), body(tenant)]}, 200),
             ("/messages/with_template", {"template": "t", "from": f"app@{tenant.domain}",
                                          "to": [rcpt()], "template_model": {"x": 1}}, 201),
             ("/messages/with_template/batch", {"template": "t", "from": f"app@{tenant.domain}",
                                                "messages": [{"to": [rcpt()]}]}, 200)]
    for path, payload, status in cases:
        key = unique("key")
        first = post(api, tenant, path, payload, key)
        second = post(api, tenant, path, payload, key)
        assert first.status_code == second.status_code == status
        assert second.headers.get("Idempotent-Replayed") == "true"
        assert first.json()["data"] == second.json()["data"]
    assert count(api, tenant) == 4


def test_eight_concurrent_duplicates_make_one_message(api, tenant):
    key, payload = unique("key"), body(tenant, to=[rcpt(), rcpt()])
    start = threading.Barrier(8)

    def one(_):
        session = requests.Session()
        start.wait()
        return session.post(f"{api.base_url}{SERVER}/messages", json=payload, timeout=60,
                            headers={"Idempotency-Key": key, "X-Server-API-Key": tenant.api_key})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(8)))
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {201, 409}, [a.text for a in answers]
    created = [a.json()["data"] for a in answers if a.status_code == 201]
    assert created and all(d == created[0] for d in created)
    assert sum(1 for a in answers if a.status_code == 201
               and "Idempotent-Replayed" not in a.headers) == 1
    assert count(api, tenant) == 2  # one submission, two recipients


def test_after_24_hours_the_key_is_free_again(api, tenant):
    key = unique("key")
    Api.data(post(api, tenant, "/messages", body(tenant), key), 201)
    clock.advance(timedelta(hours=24, seconds=1))
    fresh = post(api, tenant, "/messages", body(tenant), key)
    assert fresh.status_code == 201 and "Idempotent-Replayed" not in fresh.headers
    assert count(api, tenant) == 2


@pytest.mark.skipif(not TEST_DATABASE_URL.startswith("postgresql"),
                    reason="SQLite runs requests one at a time: a duplicate never overlaps")
def test_a_duplicate_waits_for_the_first_then_answers_409_in_progress(api, tenant, monkeypatch):
    """A first request still running is stood in for by an open transaction holding the key:
    the duplicate waits (bounded by WAIT_SECONDS), answers 409; once the first rolls back, the
    duplicate runs itself."""
    from sqlalchemy import create_engine, text

    from chalicelib.services.sending import idempotency

    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 1)
    server_id = Api.data(api.get(f"{SERVER}/", server_key=tenant.api_key))["server"]["id"]
    key, payload = unique("key"), body(tenant)
    engine = create_engine(TEST_DATABASE_URL)
    conn = engine.connect()
    try:
        conn.execute(text("INSERT INTO idempotency_keys (server_id, key, request_hash, "
                          "created_at) VALUES (:s, :k, 'x', now())"), {"s": server_id, "k": key})
        busy = post(api, tenant, "/messages", payload, key)
        error = Api.error(busy, 409, "IdempotencyInProgress")
        assert busy.headers["Retry-After"] == "1" and error["field"] == "Idempotency-Key"
        assert count(api, tenant) == 0
    finally:
        conn.rollback()
        conn.close()
        engine.dispose()
    Api.data(post(api, tenant, "/messages", payload, key), 201)
    assert count(api, tenant) == 1
