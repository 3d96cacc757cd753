"""Send limits per hour and day, counted in the database for both doors: hold (extra
messages Held, reason "send limit") or reject (429 SendLimitExceeded with Retry-After; SMTP
451), concurrent senders never together over the limit, the next window starts afresh."""
from __future__ import annotations

import smtplib
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests

from chalicelib import clock
from tests.support.smtp import simple_mail, starttls_client
from tests.support.sending import message, rcpt, send, sent_ok
from tests.support import Api

SERVER = "/api/v2/server"


def limit(api, tenant, **changes) -> dict:
    return Api.data(api.patch(tenant.server_path, changes))["server"]


def usage(api, tenant) -> dict:
    return Api.data(api.get(tenant.server_path))["server"]["send_limits"]


def test_hold_stores_messages_over_the_limit_as_held(api, tenant, mx):
    record = limit(api, tenant, send_limit_per_hour=3, send_limit_action="hold")
    assert record["send_limit_per_hour"] == 3 and record["send_limit_action"] == "hold"
    first = sent_ok(api, tenant, to=[rcpt(), rcpt()])["recipients"]
    assert [r["status"] for r in first] == ["Pending", "Pending"]
    split = sent_ok(api, tenant, to=[rcpt(), rcpt()])["recipients"]
    assert [r["status"] for r in split] == ["Pending", "Held"]
    held = message(api, tenant, split[1]["id"])
    assert held["status_details"].startswith("send limit") and held["held"] is True
    assert [e["event"] for e in held["events"]] == ["MessageHeld"]
    shown = usage(api, tenant)
    assert shown["per_hour"] == 3 and shown["used_this_hour"] == 3
    # The tenant sees the same on its own server.
    assert Api.data(api.get(f"{SERVER}/", server_key=tenant.api_key))["server"][
        "send_limits"] == shown
    assert shown["used_this_day"] == 0 and shown["per_day"] is None  # no day limit: not counted


def test_reject_answers_429_with_retry_after_and_writes_nothing(api, tenant):
    limit(api, tenant, send_limit_per_day=2, send_limit_action="reject")
    sent_ok(api, tenant, to=[rcpt()])
    response = send(api, tenant, to=[rcpt(), rcpt()])  # 2 more do not fit: all refused
    error = Api.error(response, 429, "SendLimitExceeded")
    assert "2 messages per day" in error["message"]
    assert 1 <= int(response.headers["Retry-After"]) <= 86400
    sent_ok(api, tenant, to=[rcpt()])  # the one that fits
    Api.error(send(api, tenant), 429, "SendLimitExceeded")
    assert Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key))[
        "pagination"]["total"] == 2
    assert usage(api, tenant)["used_this_day"] == 2


def test_a_batch_refuses_only_the_entries_over_the_limit(api, tenant):
    limit(api, tenant, send_limit_per_hour=2, send_limit_action="reject")
    entry = {"from": f"app@{tenant.domain}", "text_body": "x"}
    data = Api.data(api.post(f"{SERVER}/messages/batch", {"messages": [
        {**entry, "to": [rcpt()]}, {**entry, "to": [rcpt(), rcpt()]}, {**entry, "to": [rcpt()]}]},
        server_key=tenant.api_key))
    assert [m["status"] for m in data["messages"]] == ["success", "error", "success"]
    assert data["messages"][1]["error"]["code"] == "SendLimitExceeded"


def test_the_next_window_starts_afresh(api, tenant):
    limit(api, tenant, send_limit_per_hour=1, send_limit_action="reject")
    sent_ok(api, tenant)
    Api.error(send(api, tenant), 429, "SendLimitExceeded")
    clock.advance(timedelta(hours=1))
    sent_ok(api, tenant)
    # Lifting the limit (null) lets everything through.
    assert limit(api, tenant, send_limit_per_hour=None)["send_limit_per_hour"] is None
    sent_ok(api, tenant)
    sent_ok(api, tenant)


def test_held_suppressed_and_development_messages_do_not_count(api, tenant):
    limit(api, tenant, send_limit_per_hour=1, send_limit_action="reject")
    blocked = rcpt("blocked")
    Api.data(api.post(f"{tenant.server_path}/suppressions", {"address": blocked}), 201)
    sent_ok(api, tenant, to=[blocked])
    limit(api, tenant, mode="Development")
    sent_ok(api, tenant)
    limit(api, tenant, mode="Live")
    sent_ok(api, tenant)
    assert usage(api, tenant)["used_this_hour"] == 1


def test_concurrent_senders_never_get_past_the_limit_together(api, tenant):
    """Eight clients at once (each its own connection, as separate Lambda containers would
    be): the database count admits exactly the limit."""
    limit(api, tenant, send_limit_per_hour=5, send_limit_action="reject")
    start = threading.Barrier(8)

    def one(_):
        session = requests.Session()
        start.wait()
        return session.post(f"{api.base_url}{SERVER}/messages", timeout=60, json={
            "from": f"app@{tenant.domain}", "to": [rcpt()], "text_body": "x"},
            headers={"X-Server-API-Key": tenant.api_key}).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(8)))
    assert sorted(statuses) == [201] * 5 + [429] * 3
    assert usage(api, tenant)["used_this_hour"] == 5


@pytest.mark.usefixtures("clear_smtp_auth_failures")
def test_smtp_counts_against_the_same_limit_and_reject_is_a_451(stack, api, tenant):
    limit(api, tenant, send_limit_per_hour=1, send_limit_action="reject")
    sent_ok(api, tenant)  # HTTP takes the only one
    to = rcpt("smtp")
    with starttls_client(stack.smtp_port) as client:
        client.login("any", tenant.smtp_key)
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.sendmail(f"app@{tenant.domain}", [to], simple_mail(f"app@{tenant.domain}", to))
    assert refused.value.smtp_code == 451 and b"send limit" in refused.value.smtp_error
    limit(api, tenant, send_limit_action="hold")
    with starttls_client(stack.smtp_port) as client:
        client.login("any", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [to], simple_mail(f"app@{tenant.domain}", to))
    [held] = Api.data(api.get(f"{SERVER}/messages", server_key=tenant.api_key,
                              params={"query": to}))["messages"]
    assert held["status"] == "Held" and held["status_details"].startswith("send limit")


def test_limits_are_validated(api, tenant):
    error = Api.error(api.patch(tenant.server_path, {"send_limit_action": "drop"}), 422,
                      "ValidationError")
    assert error["field"] == "send_limit_action"
    Api.error(api.patch(tenant.server_path, {"send_limit_per_hour": -1}), 422, "ValidationError")
