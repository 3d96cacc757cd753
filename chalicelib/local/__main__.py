"""``python -m chalicelib.local``: run the local stack until Ctrl-C (what ``make run`` does)."""
from __future__ import annotations

import logging
import signal
import sys
import threading

from chalicelib.config import ConfigError, get_settings


def main() -> int:
    try:
        settings = get_settings()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "mail.log"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    sys.path.insert(0, ".")
    from app import app  # noqa: E402  (the Chalice app at the repository root)
    from chalicelib.local.stack import LocalStack

    stack = LocalStack(app).start()
    print(f"HTTP API     {stack.base_url}  (GET /health)", flush=True)
    print(f"SMTP gateway {settings.host}:{stack.smtp_port}", flush=True)
    print(f"database     {settings.database_url}", flush=True)
    print("queue        in-process workers and sweeper; Ctrl-C stops everything", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    print("stopping…", flush=True)
    stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
