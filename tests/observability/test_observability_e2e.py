"""Logs and metrics through the running stack: each event of the pipeline writes its line
(JSON or text) with the fields an operator needs and never a secret; GET /metrics counts what
happened; EMF lines in the cloud mode."""
from __future__ import annotations

import io
import json
import re

import pytest
import requests

from chalicelib import observability
from tests.support.accounts import make_user, try_login
from tests.support.webhooks import create_webhook
from tests.receivers import Receiver
from tests.support import Api, unique, wait_for
from tests.support.observability import metrics

SERVER = "/api/v2/server"






def send(api, tenant, to: str) -> dict:
    body = {"from": f"App <app@{tenant.domain}>", "to": [to], "subject": "Hi", "text_body": "Hi"}
    [recipient] = Api.data(api.post(f"{SERVER}/messages", body, server_key=tenant.api_key),
                           201)["recipients"]
    return recipient


def test_a_send_and_its_delivery_attempts_write_one_line_each(api, tenant, mx, logs):
    mx.script = ["451 4.7.1 greylisted", "250"]
    to = f"{unique('obs')}@recipient.example"
    sent = send(api, tenant, to)
    accepted = logs.wait("submission.accepted", messages=[sent["id"]])
    assert accepted["recipients"] == 1 and accepted["source"] == "api"
    assert accepted["correlation_id"] and accepted["path"] == f"{SERVER}/messages"
    delivered = logs.wait("delivery.attempt", message_id=sent["id"], status="Sent")
    deferred = logs.find("delivery.attempt", message_id=sent["id"], status="SoftFail")
    assert len(deferred) == 1 and deferred[0]["code"] == 451 and deferred[0]["level"] == "WARNING"
    assert "greylisted" in deferred[0]["details"]
    assert delivered["token"] == sent["token"] and delivered["code"] == 250
    assert delivered["host"] == mx.relay and delivered["attempt"] == 2
    assert isinstance(delivered["duration_ms"], int) and delivered["rcpt_to"] == to


def test_a_permanent_refusal_and_a_suppressed_recipient(api, tenant, mx, logs):
    # Refused at RCPT: a "no such user" answering the data (after the recipient was accepted)
    # now counts as a repeat, not at once (services/suppressions/policy.py), so the script
    # names the stage; it used to be the reply to DATA.
    mx.script = ["rcpt:550 5.1.1 no such user"]
    to = f"{unique('gone')}@recipient.example"
    first = send(api, tenant, to)
    failed = logs.wait("delivery.attempt", message_id=first["id"], status="HardFail")
    assert failed["code"] == 550 and "no such user" in failed["details"]
    again = send(api, tenant, to)  # now on the suppression list: held at submission
    assert again["status"] == "Held"
    assert logs.wait("submission.accepted", messages=[again["id"]])["held"] == 1


def test_failed_logins_lockout_wrong_keys_and_bad_json_are_logged_without_secrets(
        api, tenant, logs, monkeypatch):
    monkeypatch.setenv("AUTH_MAX_LOGIN_ATTEMPTS", "2")
    person = make_user(api, sign_in=False)
    wrong_password = "Wrong-Password-" + unique("pw")
    for _ in range(2):
        try_login(api, person.email, wrong_password)
    failed = logs.wait("auth.login_failed", email_address=person.email)
    assert failed["level"] == "WARNING" and failed["client_ip"] == "127.0.0.1"
    assert logs.wait("auth.lockout", email_address=person.email)["user_id"] == person.id

    wrong_admin_key = "not-the-admin-key-" + unique("k")
    Api.error(api.get("/api/v2/admin/organizations", admin_key=wrong_admin_key), 401,
              "Unauthorized")
    rejected = logs.wait("admin_key.rejected")
    assert rejected["path"] == "/api/v2/admin/organizations"
    wrong_server_key = "not-a-server-key-" + unique("k")
    Api.error(api.get(f"{SERVER}/messages", server_key=wrong_server_key), 401, "Unauthorized")
    logs.wait("credential.rejected", path=f"{SERVER}/messages")

    response = requests.post(api.base_url + f"{SERVER}/messages", data=b'{"from": oops',
                             headers={"X-Server-API-Key": tenant.api_key,
                                      "Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 422
    bad = logs.wait("request.bad_json", path=f"{SERVER}/messages")
    assert bad["method"] == "POST" and bad["correlation_id"]

    text = logs.text()
    for secret in (wrong_password, person.password, wrong_admin_key, wrong_server_key,
                   tenant.api_key, tenant.smtp_key, api.admin_key):
        assert secret not in text


def test_webhook_attempts_are_logged_without_header_values_or_query(api, tenant, mx, logs):
    with Receiver([500, 200]) as rx:
        create_webhook(api, tenant, rx.url + "?token=query-secret-123",
                       headers={"X-Hook-Secret": "header-secret-456"})
        sent = send(api, tenant, f"{unique('wh')}@recipient.example")
        wait_for(lambda: len(rx.requests) >= 2, 30, message="two webhook POSTs")
        failed = logs.wait("webhook.attempt", success=False)
        ok = logs.wait("webhook.attempt", success=True)
    assert failed["status_code"] == 500 and failed["level"] == "WARNING"
    assert ok["event_name"] == "MessageSent" and ok["attempt"] == 2
    assert ok["url"] == rx.url.split("?")[0] and sent["id"]
    assert "query-secret-123" not in logs.text() and "header-secret-456" not in logs.text()


def test_text_format_is_one_readable_line(api, tenant, mx, monkeypatch):
    monkeypatch.setenv("LOG_FORMAT", "text")
    buffer = io.StringIO()
    restore = observability.capture(buffer)
    try:
        sent = send(api, tenant, f"{unique('txt')}@recipient.example")
        line = wait_for(lambda: next((x for x in buffer.getvalue().splitlines()
                                      if "delivery.attempt" in x and f"message_id={sent['id']} "
                                      in x), None), 20, message="the text line")
    finally:
        restore()
    assert re.match(r"^\d\d:\d\d:\d\d\.\d+ INFO +delivery\.attempt message_id=", line) or \
        re.match(r"^\d\d:\d\d:\d\d INFO +delivery\.attempt message_id=", line), line
    assert f"token={sent['token']}" in line and "code=250" in line and "status=Sent" in line
    assert not line.startswith("{")




def test_metrics_count_what_happened(api, tenant, mx):
    before = metrics(api)
    mx.script = ["451 4.7.1 later", "250", "550 5.1.1 unknown"]
    first = send(api, tenant, f"{unique('m')}@recipient.example")
    second = send(api, tenant, f"{unique('m')}@recipient.example")

    def grown():
        now = metrics(api)
        return now if now["email_service_sent_total"] >= before["email_service_sent_total"] + 1 \
            and now["email_service_failed_total"] >= before["email_service_failed_total"] + 1 \
            and now else None
    after = wait_for(grown, 20, message="sent and failed counters to grow")
    assert first["id"] and second["id"]
    assert after["email_service_accepted_total"] >= before["email_service_accepted_total"] + 2
    assert after["email_service_deferred_total"] >= before["email_service_deferred_total"] + 1
    for queue in ("deliveries", "webhooks", "inbound"):
        assert f'email_service_queue_lag_seconds{{queue="{queue}"}}' in after


def test_queue_lag_is_the_age_of_the_oldest_due_row(api, tenant):
    """A webhook row due ten minutes ago that no worker will take (its webhook is disabled,
    and the claim requires an enabled one) is what lag looks like, also when the sweeper
    has woken it already (a backlog's rows are: the lag was once read from the rows the
    sweeper had not woken, and read 0 in a backlog). A wake-up drops a disabled webhook's
    row; should one reach it between the insert and the read, the test inserts it again."""
    from datetime import timedelta

    from chalicelib import clock
    from tests.support import all_tenants
    from chalicelib.db.models import WebhookRequest
    from tests.support.webhooks import server_id

    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
    Api.data(api.post(tenant.server_path + f"/webhooks/{hook['id']}/disable"))
    for _ in range(5):
        with all_tenants() as db:
            row = WebhookRequest(server_id=server_id(tenant), webhook_id=hook["id"],
                                 event="MessageSent", uuid=unique("u"), body="{}",
                                 next_attempt_at=clock.now() - timedelta(minutes=10),
                                 woken_at=clock.now())
            db.add(row)
            db.flush()
            row_id = row.id
        lag = metrics(api)['email_service_queue_lag_seconds{queue="webhooks"}']
        with all_tenants() as db:
            kept = db.get(WebhookRequest, row_id)
            if kept is not None:
                db.delete(kept)
        if kept is not None:
            break
    assert kept is not None, "a sweep dropped the row every time"
    assert lag >= 600
    lag = metrics(api)['email_service_queue_lag_seconds{queue="webhooks"}']
    assert lag < 600


def test_reading_the_queue_lag_marks_no_row_woken(api, tenant):
    """The lag is a read (``due_ids(sweeping=False)``, what ``sweeper.queue_lags`` asks): a
    due row it finds stays unwoken, where the sweeper's own call marks it (a mark would hold
    the sweeper off the row for SWEEP_REWAKE_SECONDS, were its wake-up lost). The stack's own
    sweeper is held off meanwhile: its grace in the tests is 1 s, and its wake-up would drop
    the disabled webhook's row (once, on a slow machine, between the two calls)."""
    from tests.support import sweeps_held

    with Receiver([200]) as rx:
        hook = create_webhook(api, tenant, rx.url)
    Api.data(api.post(tenant.server_path + f"/webhooks/{hook['id']}/disable"))
    with sweeps_held():
        _read_then_sweep(hook, tenant)


def _read_then_sweep(hook, tenant):
    from datetime import timedelta

    from chalicelib import clock
    from chalicelib.db import claims
    from chalicelib.db.models import WebhookRequest
    from tests.support import all_tenants
    from tests.support.webhooks import server_id

    with all_tenants() as db:
        row = WebhookRequest(server_id=server_id(tenant), webhook_id=hook["id"],
                             event="MessageSent", uuid=unique("u"), body="{}",
                             next_attempt_at=clock.now() - timedelta(seconds=5))
        db.add(row)
        db.flush()
        row_id = row.id
    ours = WebhookRequest.id == row_id
    try:
        with all_tenants() as db:
            read = claims.due_ids(db, WebhookRequest, 1, 0.0, ours, sweeping=False)
        with all_tenants() as db:
            after_read = db.get(WebhookRequest, row_id).woken_at
        with all_tenants() as db:
            swept = claims.due_ids(db, WebhookRequest, 1, 0.0, ours)
        with all_tenants() as db:
            after_sweep = db.get(WebhookRequest, row_id).woken_at
    finally:
        with all_tenants() as db:
            kept = db.get(WebhookRequest, row_id)
            if kept is not None:
                db.delete(kept)
    assert read == [row_id] and after_read is None
    assert swept == [row_id] and after_sweep is not None


def test_metrics_endpoint_is_off_with_emf_and_emf_lines_are_written(api, monkeypatch, capsys):
    """With EMF the counters are written as one line a flush. The stack's own sweeper is
    held off while they are: with EMF each of its sweeps writes the queue lag too (three more
    lines, which a slow machine's sweep once put among the counters' line)."""
    from tests.support import sweeps_held

    monkeypatch.setenv("METRICS_BACKEND", "emf")
    response = requests.get(api.base_url + "/metrics", timeout=10)
    assert response.status_code == 404 and response.json()["error"]["code"] == "NotFound"
    with sweeps_held():
        capsys.readouterr()
        observability.count("sent")
        observability.count("sent")
        observability.count("webhook_failed")
        observability.flush()
        observability.flush()  # nothing pending: no second line
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"_aws"' in x]
    assert len(lines) == 1
    [directive] = lines[0]["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "EmailService"
    assert {m["Name"] for m in directive["Metrics"]} == {"MessagesSent", "WebhookFailed"}
    assert sum(lines[0]["MessagesSent"]) == 2 and lines[0]["service"] == "email-service"

    from chalicelib.workers import sweeper

    sweeper.sweep()  # the cloud's scheduled sweep also writes the queue lag
    lags = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"_aws"' in x]
    assert {line["queue"] for line in lags} == {"deliveries", "webhooks", "inbound"}
    assert all(line["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"] == "QueueLagSeconds"
               and line["QueueLagSeconds"][0] >= 0 for line in lags)


@pytest.mark.usefixtures("clear_smtp_auth_failures")
def test_smtp_submissions_auth_failures_and_sessions(stack, api, tenant, mx, logs):
    import smtplib

    from tests.support.smtp import simple_mail, starttls_client

    before = metrics(api)["email_service_smtp_sessions_total"]
    with starttls_client(stack.smtp_port) as client:
        with pytest.raises(smtplib.SMTPAuthenticationError):
            client.login("user", "wrong-smtp-password-123")
    failed = logs.wait("smtp.auth_failed")
    assert failed["client_ip"] == "127.0.0.1" and failed["reply"].startswith("535")
    to = f"{unique('smtp')}@recipient.example"
    with starttls_client(stack.smtp_port) as client:
        client.login("user", tenant.smtp_key)
        client.sendmail(f"app@{tenant.domain}", [to], simple_mail(f"app@{tenant.domain}", to))
    delivered = logs.wait("delivery.attempt", rcpt_to=to, status="Sent")
    logs.wait("submission.accepted", source="smtp", messages=[delivered["message_id"]])
    assert metrics(api)["email_service_smtp_sessions_total"] >= before + 2
    assert "wrong-smtp-password-123" not in logs.text() and tenant.smtp_key not in logs.text()
