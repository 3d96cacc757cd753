"""``python -m chalicelib.local``: run the local stack until Ctrl-C (what ``make run`` does)."""
from __future__ import annotations

import logging
import os
import sys

from chalicelib.config import ConfigError, get_settings
from chalicelib.local.signals import StopRequest


# What a newcomer's `make run` means unless they say otherwise: readable log lines, and no
# mail leaving the machine (DELIVERY_RELAY=mx or host:port to deliver for real).
LOCAL_DEFAULTS = {"LOG_FORMAT": "text", "DELIVERY_RELAY": "capture"}


def _outgoing(settings) -> str:
    relay = settings.delivery_relay.strip()
    if relay.lower() == "capture":
        files = f" and {settings.capture_dir}/<token>.eml" if settings.capture_dir else ""
        return (f"captured in the console's Captured mail page{files}, shown as Sent, never "
                "sent (DELIVERY_RELAY=mx or host:port to deliver)")
    if relay and relay.lower() != "mx":
        return f"relayed through {relay} (DELIVERY_RELAY)"
    return "delivered to the recipients' MX hosts over the internet (DELIVERY_RELAY=mx)"


def _return_path(settings) -> str:
    """Where bounces come back, and the SPF record receivers evaluate for it."""
    from chalicelib.services.domains.records import return_path_spf

    record = return_path_spf(settings)
    return (f"<token>@{record['name']} (tenants' return-path CNAMEs lead there): before "
            f"delivering for real publish {record['name']} TXT \"{record['value']}\" and "
            f"the sending addresses at {settings.effective_spf_include}, else SPF is none "
            "for every return path (docs/deploying.md)")


def _database(settings) -> str:
    """DATABASE_URL without its password; with DATABASE_OWNER_URL, whom migrations run as."""
    from sqlalchemy.engine import make_url

    shown = make_url(settings.database_url).render_as_string(hide_password=True)
    if settings.database_owner_url:
        owner = make_url(settings.database_owner_url).username
        shown += f" (migrations as {owner}, DATABASE_OWNER_URL; row-level security binds " \
                 f"{make_url(settings.database_url).username})"
    return shown


def main() -> int:
    for name, value in LOCAL_DEFAULTS.items():
        os.environ.setdefault(name, value)
    try:
        settings = get_settings()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "mail.log"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from chalicelib.services.security.keys import startup_warnings

    if settings.worker_processes == 0 and settings.http_processes == 1 and \
            settings.smtp_processes == 1:
        sys.path.insert(0, ".")
        from app import app  # noqa: E402  (the Chalice app at the repository root)
        from chalicelib.local.stack import LocalStack

        stack = LocalStack(app, workers=settings.worker_threads).start()
        processes = (f"one process: HTTP API, SMTP gateway, {settings.worker_threads} worker "
                     "threads and the sweeper (WORKER_PROCESSES=0)")
    else:
        from chalicelib.local.supervisor import Supervisor

        stack = Supervisor(settings).start()
        counts = stack.counts()
        workers = f"{counts['worker']} worker processes ({settings.worker_threads} threads " \
            "each)" if counts.get("worker") else \
            f"{settings.worker_threads} worker threads in this process"
        processes = (f"{counts.get('http', 0)} HTTP API, {counts.get('smtp', 0)} SMTP gateway "
                     f"and {workers} (HTTP_PROCESSES, SMTP_PROCESSES, WORKER_PROCESSES, "
                     "WORKER_THREADS), supervised: a dead one is restarted; the shared queue "
                     "and the sweeper run in this process")
    print(f"console      {stack.base_url}/  (open it in a browser; the first visit offers to "
          "create the instance admin)", flush=True)
    # Addresses that answer a GET as printed (there is no /api/v2/health: the spec's liveness
    # probe is /health, outside the versioned API).
    print(f"HTTP API     {stack.base_url}/api/v2/…  (reference: {stack.base_url}/api/v2/openapi.json"
          f", liveness: {stack.base_url}/health)", flush=True)
    print(f"SMTP gateway {settings.host}:{stack.smtp_port}", flush=True)
    print(f"database     {_database(settings)}", flush=True)
    print(f"processes    {processes}", flush=True)
    print("queue        wake-ups in memory (the rows are the truth: the sweeper re-wakes what "
          "a stop or a killed worker lost); Ctrl-C stops everything", flush=True)
    print(f"outgoing     {_outgoing(settings)}", flush=True)
    print(f"return path  {_return_path(settings)}", flush=True)
    if settings.metrics_backend == "prometheus":
        print(f"metrics      {stack.base_url}/metrics (Prometheus text)", flush=True)
    print(f"logs         {settings.log_format} lines on stdout (LOG_FORMAT=json|text)", flush=True)
    if settings.admin_api_key:
        print("admin key    seeded from ADMIN_API_KEY (a key seeded from a different value "
              "earlier is revoked)", flush=True)
    for line in stack.notes + startup_warnings(settings):
        print(f"WARNING      {line}", flush=True)
    stopped = StopRequest().install()
    if hasattr(stack, "run"):
        stack.run(stopped)  # supervises the children until stopped
    else:
        stopped.wait()
    print("stopping…", flush=True)
    stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
