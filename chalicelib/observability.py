"""Logs, metrics and traces: the one module that knows how they are written. Services add
one-line calls where things happen; nothing else imports Powertools.

Logs. ``log("delivery.attempt", message_id=5, host="mx.example.net", code=250)`` writes one
line through Powertools' Logger: JSON (``LOG_FORMAT=json``: CloudWatch Logs Insights can
filter on every field) or ``key=value`` text (``LOG_FORMAT=text``, the readable local
console). Lines written during a request or an invocation carry its ``correlation_id`` (API
Gateway's request id, or the Lambda request id) and, for HTTP, the method, path and client
address. Callers never pass a secret, password, key or header value; as a second guard a field
whose name says it holds one is written as ``[redacted]``.

Metrics. ``count("sent")`` adds to a counter (COUNTERS names them). ``METRICS_BACKEND=emf``
(the deployed stages and the gateway container): Powertools Metrics, written as one CloudWatch
embedded-metric-format line per Lambda invocation (``middleware``) or per SMTP session
(``flush``), namespace EmailService, dimension service. ``prometheus`` (local): in-process
counters served by GET /metrics in the Prometheus text format, with the queue lag read from
the database at scrape time; `make run`'s processes add theirs to one tally in the supervisor
(``share_counters``), so any HTTP process serves every process's counts. ``off``: neither.

Traces. ``TRACING=true`` (the deployed stages, with X-Ray active tracing on the functions):
Powertools' Tracer records one subsegment per queue-worker or schedule invocation with its
handler as annotation and patches botocore, so SQS calls show in the trace. HTTP requests
get active tracing's segments only (see ``middleware``).

Powertools is imported at the first log line, metric flush or traced invocation, never when
app.py is imported: the Lambda cold-import aim (bench/bench_package.py) has no room for it.
"""
from __future__ import annotations

import contextvars
import functools
import json
import logging
import os
import sys
import threading
import uuid
from datetime import datetime
from typing import Any, Callable

from chalicelib.config import get_settings

# The service dimension and log field: POWERTOOLS_SERVICE_NAME (the deployed stages name
# theirs, email-service-dev / -prod, so their metrics and alarms stay apart).
DEFAULT_SERVICE = "email-service"
NAMESPACE = "EmailService"

# counter key -> (CloudWatch metric name, help text); Prometheus: email_service_<key>_total
COUNTERS: dict[str, tuple[str, str]] = {
    "accepted": ("MessagesAccepted",
                 "Outgoing messages accepted (one per recipient), HTTP and SMTP."),
    "sent": ("MessagesSent", "Outgoing messages accepted by the receiving server (or captured)."),
    "deferred": ("MessagesDeferred",
                 "Delivery attempts that failed temporarily (a retry follows)."),
    "failed": ("MessagesFailed", "Outgoing messages that failed for good (HardFail)."),
    "held": ("MessagesHeld", "Outgoing messages held (suppressed recipient, unknown outcome)."),
    "paced": ("MessagesPaced",
              "Delivery attempts put off because their destination was paced (a backoff, "
              "its connections or its rate); no attempt is counted."),
    "bounced": ("MessagesBounced", "Hard bounces received (the message becomes Bounced)."),
    "complained": ("MessagesComplained",
                   "Spam complaints (feedback reports other than not-spam) received."),
    "infrastructure_signals": ("InfrastructureSignals",
                               "Refusals that blamed the sending IP address or domain (block "
                               "list, reputation, reverse DNS, authentication), in delivery "
                               "or in a bounce."),
    "reputation_warnings": ("ReputationWarnings",
                            "Servers whose bounce or complaint rate reached a warning "
                            "threshold of the reputation guard (once per warning)."),
    "reputation_pauses": ("ReputationPauses",
                          "Servers whose sending the reputation guard paused."),
    "webhook_succeeded": ("WebhookSucceeded", "Webhook POSTs answered with a 2xx."),
    "webhook_failed": ("WebhookFailed", "Webhook POSTs that failed (non-2xx, timeout, refused)."),
    "inbound_delivered": ("InboundDelivered", "Inbound messages delivered to their endpoint."),
    "inbound_failed": ("InboundFailed", "Inbound endpoint delivery attempts that failed."),
    "smtp_sessions": ("SmtpSessions", "SMTP connections accepted by the gateway."),
    "dmarc_reports": ("DmarcReports", "DMARC aggregate reports stored (resends not counted)."),
    "dmarc_refused": ("DmarcRefused",
                      "DMARC report mails refused: unreadable, past a limit, or not about the "
                      "domain of the address."),
}

# Field names that would hold a secret: never written, whatever the caller passes.
_SECRET_WORDS = ("password", "secret", "api_key", "authorization", "cookie", "session_token",
                 "header", "totp", "credential_key")
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message",
                                                                                   "asctime"}

_context: contextvars.ContextVar[dict] = contextvars.ContextVar("observability", default={})
_lock = threading.RLock()
_logger = None
_handler: logging.StreamHandler | None = None
_format: tuple | None = None
_counts: dict[str, float] = {}
# `make run`'s processes: adds this process's new counts to the shared tally, returns its totals.
_share: Callable[[dict[str, float]], dict[str, float]] | None = None
_emf = None               # Powertools Metrics, built on first use with METRICS_BACKEND=emf
_emf_pending = False
_tracer = None


# ---------------------------------------------------------------------------------- logs

def service() -> str:
    return os.environ.get("POWERTOOLS_SERVICE_NAME") or DEFAULT_SERVICE


@functools.lru_cache(maxsize=512)
def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _safe(name: str, value: Any) -> Any:
    if _is_secret(name):
        return "[redacted]"
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _formatter(log_format: str):
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    class TextFormatter(LambdaPowertoolsFormatter):
        """The same record as the JSON one, as ``time LEVEL event key=value ...``."""

        def serialize(self, log: dict) -> str:
            log = dict(log)
            head = (f"{log.pop('timestamp', '')} {log.pop('level', ''):<7} "
                    f"{log.pop('message', '')}")
            for drop in ("service", "location", "sampling_rate", "event"):
                log.pop(drop, None)
            trace = log.pop("stack_trace", None) or log.pop("exception", None)
            parts = [head] + [f"{k}={_text_value(v)}" for k, v in log.items()]
            line = " ".join(parts)
            if trace:
                line += "\n" + (trace if isinstance(trace, str) else json.dumps(trace))
            return line

    if log_format == "text":
        return TextFormatter(datefmt="%H:%M:%S", utc=True, serialize_stacktrace=False)
    return LambdaPowertoolsFormatter(utc=True)


def _build_logger():
    from aws_lambda_powertools import Logger

    global _handler
    _handler = logging.StreamHandler(sys.stdout)
    logger = Logger(service=service(), level=get_settings().log_level.upper(),
                    logger_handler=_handler, logger_formatter=_formatter("json"))
    logger._logger.propagate = False  # one line, not a second copy through the root logger
    return logger


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(c in text for c in " \t\r\n\"="):  # quoted: no value forges a line
        return json.dumps(text)
    return text


def logger():
    """The Powertools Logger (one per process: Powertools configures a named logger once);
    a changed LOG_FORMAT or LOG_LEVEL swaps its formatter or level."""
    global _logger, _format
    settings = get_settings()
    wanted = (settings.log_format, settings.log_level.upper())
    if _logger is None or _format != wanted:
        with _lock:
            if _logger is None:
                _logger = _build_logger()
            if _format != wanted:
                _handler.setFormatter(_formatter(wanted[0]))
                _logger.append_keys(service=service())  # the keys live on the formatter
                _logger.setLevel(wanted[1])
                _format = wanted
    return _logger


def log(event: str, level: str = "info", **fields: Any) -> None:
    """One structured line for ``event`` (dotted lower-case name, e.g. ``delivery.attempt``)."""
    extra = {"event": event}
    for source in (_context.get(), fields):
        for name, value in source.items():
            if value is None:
                continue
            key = f"{name}_" if name in _RESERVED else name
            extra[key] = _safe(name, value)
    try:
        # stacklevel: "location" names the caller of log(), not this line
        getattr(logger(), level)(event, extra=extra, stacklevel=3)
    except Exception:  # noqa: BLE001  (a log line must never break the work it describes)
        logging.getLogger(__name__).exception("could not write the %s log line", event)


@functools.lru_cache(maxsize=1024)  # (a webhook's URL is logged at every attempt)
def safe_url(url: str) -> str:
    """A URL without user info, query or fragment (where tokens hide)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def write_lines(text: str) -> None:
    """Log lines another process formatted (the SMTP gateway's committer process) written to
    this process's log stream, as its own."""
    if not text:
        return
    logger()
    with _lock:
        _handler.stream.write(text)
        _handler.flush()


def capture(stream) -> Callable[[], None]:
    """Send log lines to ``stream`` (tests); returns a function that restores stdout."""
    logger()
    with _lock:
        previous = _handler.setStream(stream)

    def restore() -> None:
        with _lock:
            _handler.setStream(previous)
    return restore


# ------------------------------------------------------------------------------- metrics

def count(name: str, value: float = 1) -> None:
    """Add ``value`` to counter ``name`` (a COUNTERS key)."""
    global _emf_pending
    if name not in COUNTERS:
        raise KeyError(f"unknown counter {name!r}: add it to observability.COUNTERS")
    if not value:
        return
    backend = get_settings().metrics_backend
    with _lock:
        if backend == "prometheus":
            _counts[name] = _counts.get(name, 0) + value
        elif backend == "emf":
            from aws_lambda_powertools.metrics import MetricUnit

            _metrics().add_metric(name=COUNTERS[name][0], unit=MetricUnit.Count, value=value)
            _emf_pending = True


def _metrics():
    global _emf
    if _emf is None:
        from aws_lambda_powertools import Metrics

        _emf = Metrics(namespace=NAMESPACE, service=service())
    return _emf


def flush() -> None:
    """Write the pending EMF metrics (end of an invocation, of an SMTP session)."""
    global _emf_pending
    with _lock:
        if _emf_pending and _emf is not None:
            _emf_pending = False
            _emf.flush_metrics()


def push_counts() -> None:
    """With a shared tally: add the counts this process made since to it (a worker after
    each batch; the other processes every half second)."""
    if _share is not None and _counts:
        _exchange()


def share_counters(exchange: Callable[[dict[str, float]], dict[str, float]] | None) -> None:
    """Several processes (`make run`): ``exchange(new_counts)`` adds this process's counts
    made since its last call to a tally they share and returns the tally's totals."""
    global _share
    with _lock:
        _share = exchange


def _exchange() -> dict[str, float]:
    global _counts
    with _lock:
        new, _counts = _counts, {}
    try:
        return _share(new)
    except Exception:  # noqa: BLE001  (the supervisor is gone: this process stops soon)
        return new


def gauge_queue_lag(lags: dict[str, float]) -> None:
    """Queue lag per queue in seconds (the sweeper's measurement), as EMF with a queue
    dimension. Locally GET /metrics reads the lag itself when scraped."""
    if get_settings().metrics_backend != "emf":
        return
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    with _lock:
        for queue, seconds in lags.items():
            with single_metric(name="QueueLagSeconds", unit=MetricUnit.Seconds, value=seconds,
                               namespace=NAMESPACE) as metric:
                metric.add_dimension(name="service", value=service())
                metric.add_dimension(name="queue", value=queue)


def counters() -> dict[str, float]:
    if _share is not None:
        totals = _exchange()
        return {name: totals.get(name, 0) for name in COUNTERS}
    with _lock:
        return {name: _counts.get(name, 0) for name in COUNTERS}


def prometheus_text(lags: dict[str, float]) -> str:
    """The counters and the queue lag in the Prometheus text exposition format 0.0.4."""
    lines = []
    for name, value in counters().items():
        metric = f"email_service_{name}_total"
        lines += [f"# HELP {metric} {COUNTERS[name][1]}", f"# TYPE {metric} counter",
                  f"{metric} {value:g}"]
    lines += ["# HELP email_service_queue_lag_seconds How long the oldest due, unclaimed row "
              "of each queue has been waiting (0: none).",
              "# TYPE email_service_queue_lag_seconds gauge"]
    lines += [f'email_service_queue_lag_seconds{{queue="{q}"}} {s:.3f}'
              for q, s in sorted(lags.items())]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------- invocation context

def _request_keys(event: Any) -> dict:
    context = getattr(event, "context", None)
    if isinstance(context, dict):  # an HTTP request: API Gateway's request context
        identity = context.get("identity") or {}
        return {"correlation_id": context.get("requestId") or uuid.uuid4().hex,
                "method": getattr(event, "method", None), "path": getattr(event, "path", None),
                "source_ip": identity.get("sourceIp")}
    request_id = getattr(context, "aws_request_id", None)
    return {"correlation_id": request_id or uuid.uuid4().hex,
            "function": getattr(context, "function_name", None)}


def bind(**keys: Any) -> contextvars.Token:
    """Add ``keys`` to every log line of this request, thread or task until ``unbind``."""
    return _context.set({**_context.get(), **keys})


def unbind(token: contextvars.Token) -> None:
    _context.reset(token)


def middleware(event: Any, get_response: Callable) -> Any:
    """Every Chalice event (HTTP, SQS, schedule, plain Lambda): correlation keys on its log
    lines, a trace subsegment when tracing is on, and the EMF metrics flushed at the end."""
    keys = _request_keys(event)
    token = bind(**keys)
    try:
        # HTTP requests are traced by X-Ray active tracing alone: importing the X-Ray SDK
        # builds botocore clients for its sampler (about a second on a busy host), which no
        # API request should wait for; queue workers and schedules carry the Tracer.
        tracer = None if "method" in keys else _get_tracer()
        if tracer is None:
            return get_response(event)
        name = getattr(getattr(event, "context", None), "function_name", None) or service()
        with tracer.provider.in_subsegment(f"## {name}") as subsegment:
            # None when there is no segment to hang it on (no trace id: outside Lambda, or a
            # runtime without X-Ray); the invocation runs all the same, untraced.
            if subsegment is not None:
                subsegment.put_annotation("handler", name)
                subsegment.put_annotation("correlation_id", _context.get()["correlation_id"])
            return get_response(event)
    finally:
        unbind(token)
        flush()


def _get_tracer():
    global _tracer
    if not get_settings().tracing:
        return None
    if _tracer is None:
        with _lock:
            if _tracer is None:
                from aws_lambda_powertools import Tracer

                tracer = Tracer(service=service(), disabled=False, auto_patch=False)
                tracer.patch(["botocore"])
                _tracer = tracer
    return _tracer
