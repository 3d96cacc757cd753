"""The observability module on its own: text/JSON lines, redaction, the Prometheus text, and
the Tracer subsegment around an invocation (in a fresh interpreter: the X-Ray SDK patches
botocore process-wide)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from chalicelib import observability

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def lines(monkeypatch):
    buffer = io.StringIO()
    restore = observability.capture(buffer)
    yield buffer
    restore()


def test_fields_named_like_secrets_are_never_written(monkeypatch, lines):
    monkeypatch.setenv("LOG_FORMAT", "json")
    observability.log("test.secrets", password="pw-1", api_key="ak-2", session_token="st-3",
                      headers={"X-Token": "hv-4"}, authorization="Bearer au-5", kept="visible")
    [record] = [json.loads(x) for x in lines.getvalue().splitlines()]
    assert record["kept"] == "visible" and record["password"] == "[redacted]"
    for secret in ("pw-1", "ak-2", "st-3", "hv-4", "au-5"):
        assert secret not in lines.getvalue()


def test_bound_keys_reach_every_line_until_unbound(monkeypatch, lines):
    monkeypatch.setenv("LOG_FORMAT", "json")
    token = observability.bind(correlation_id="corr-1")
    observability.log("test.one")
    observability.unbind(token)
    observability.log("test.two")
    one, two = [json.loads(x) for x in lines.getvalue().splitlines()]
    assert one["correlation_id"] == "corr-1" and "correlation_id" not in two
    assert one["service"] == "email-service" and one["location"].startswith("test_bound_keys")


def test_text_lines_quote_what_needs_quoting(monkeypatch, lines):
    monkeypatch.setenv("LOG_FORMAT", "text")
    observability.log("delivery.attempt", "warning", message_id=7, details="451 try later",
                      host="mx.example.net")
    line = lines.getvalue().strip()
    assert " WARNING delivery.attempt message_id=7 details=\"451 try later\" " \
           "host=mx.example.net" in line
    observability.log("test.forged", reply="ok\n12:00:00 INFO    auth.login user_id=1")
    assert len(lines.getvalue().strip().splitlines()) == 2  # the newline stays inside quotes


def test_safe_url_drops_user_info_query_and_fragment():
    assert observability.safe_url("https://u:p@hooks.example.com:8443/in?token=x#y") == \
        "https://hooks.example.com:8443/in"


def test_prometheus_text(monkeypatch):
    monkeypatch.setenv("METRICS_BACKEND", "prometheus")
    before = observability.counters()["sent"]
    observability.count("sent", 2)
    text = observability.prometheus_text({"deliveries": 1.25})
    assert f"email_service_sent_total {before + 2:g}" in text
    assert "# TYPE email_service_sent_total counter" in text
    assert 'email_service_queue_lag_seconds{queue="deliveries"} 1.250' in text
    with pytest.raises(KeyError):
        observability.count("no_such_counter")


def test_off_counts_nothing(monkeypatch):
    monkeypatch.setenv("METRICS_BACKEND", "off")
    before = observability.counters()["sent"]
    observability.count("sent")
    assert observability.counters()["sent"] == before


TRACED = r"""
import json, os
os.environ.update(TRACING="true", AWS_XRAY_CONTEXT_MISSING="LOG_ERROR")
from aws_xray_sdk.core import xray_recorder
from chalicelib import observability

class Context:
    function_name = "deliveries_worker"
    aws_request_id = "req-42"

class Event:
    context = Context()

xray_recorder.configure(sampling=False)  # no daemon to ask for sampling rules
segment = xray_recorder.begin_segment("invocation", sampling=1)
seen = {}
def get_response(event):
    observability.log("test.worker")
    sub = xray_recorder.current_subsegment()
    seen.update(name=sub.name, annotations=dict(sub.annotations), parent=sub.parent_id)
    return "done"
assert observability.middleware(Event(), get_response) == "done"
print(json.dumps({**seen, "segment": segment.id}))
"""


def test_tracing_wraps_each_invocation_in_a_subsegment():
    out = subprocess.run([sys.executable, "-c", TRACED], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line, result = [json.loads(x) for x in out.stdout.strip().splitlines()[-2:]]
    assert (line["function"], line["correlation_id"]) == ("deliveries_worker", "req-42")
    assert result["name"] == "## deliveries_worker" and result["parent"] == result["segment"]
    assert result["annotations"] == {"handler": "deliveries_worker",
                                     "correlation_id": "req-42"}


NO_SEGMENT = r"""
import json, os
for name in ("_X_AMZN_TRACE_ID", "LAMBDA_TASK_ROOT", "AWS_XRAY_CONTEXT_MISSING"):
    os.environ.pop(name, None)
os.environ.update(TRACING="true", AWS_DEFAULT_REGION="us-east-1")
from chalicelib import observability

class Context:
    aws_request_id, function_name = "req-7", "sweep"

class Event:
    context = Context()

print(json.dumps({"result": observability.middleware(Event(), lambda event: "done")}))
"""


def test_an_invocation_without_a_trace_segment_runs_untraced():
    """No X-Ray segment to hang the subsegment on (no trace id): the X-Ray SDK hands back
    None, and the invocation must run all the same (it crashed on put_annotation)."""
    out = subprocess.run([sys.executable, "-c", NO_SEGMENT], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"result": "done"}


HTTP_UNTRACED = r"""
import json, os, sys
os.environ.update(TRACING="true")
from chalicelib import observability

class Request:
    method, path = "GET", "/health"
    context = {"requestId": "api-1", "identity": {"sourceIp": "192.0.2.1"}}

seen = {}
def get_response(event):
    observability.log("test.inside")
    return "ok"
assert observability.middleware(Request(), get_response) == "ok"
print(json.dumps({"xray": "aws_xray_sdk" in sys.modules}))
"""


def test_http_requests_do_not_load_the_xray_sdk():
    out = subprocess.run([sys.executable, "-c", HTTP_UNTRACED], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()
    line = json.loads(last[-2])
    assert line["correlation_id"] == "api-1" and line["source_ip"] == "192.0.2.1"
    assert line["method"] == "GET" and line["path"] == "/health"
    assert json.loads(last[-1]) == {"xray": False}
