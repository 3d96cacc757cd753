"""The SMTP gateway as a plain process (the container's entrypoint; tests start it this way).

    python smtp-gateway/server.py            serve until SIGTERM/SIGINT
    python smtp-gateway/server.py --check    health check: exit 0 when the gateway greets

Listeners: SMTP_PORT and SMTP_SUBMISSION_PORTS (plain with STARTTLS), SMTP_TLS_PORT (implicit
TLS) on HOST; OUTBOUND_RELAY_PORT, the outbound relay of IP pools (off unless set). The gateway only writes rows and wake-ups (QUEUE_BACKEND=sqs in the cloud); the
queue workers and the sweeper run elsewhere, so mail accepted here is never lost with it.
"""
from __future__ import annotations

import logging
import os
import signal
import smtplib
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from chalicelib.config import ConfigError, get_settings  # noqa: E402


def check(settings) -> int:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    try:
        with smtplib.SMTP(host, settings.smtp_port, timeout=5) as client:
            code, _ = client.noop()
        return 0 if code == 250 else 1
    except (OSError, smtplib.SMTPException) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str]) -> int:
    try:
        if "--check" not in argv:
            # ECS injects DATABASE_PASSWORD and SIGNING_KEY_PEM from Secrets Manager.
            from chalicelib import aws_bootstrap

            aws_bootstrap.load_once(force=True)
        settings = get_settings()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if "--check" in argv:
        return check(settings)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("mail.log").setLevel(logging.WARNING)
    from chalicelib.services.security.keys import startup_warnings
    from chalicelib.smtp.gateway import Gateway

    for warning in startup_warnings(settings):
        logging.getLogger("smtp-gateway").warning(warning)

    gateway = Gateway(settings.host, settings.smtp_port)
    gateway.start()
    print(f"SMTP gateway on {settings.host}: STARTTLS {gateway.ports}, implicit TLS "
          f"{gateway.tls_port or 'off'}, outbound relay "
          f"{gateway.relay.port if gateway.relay else 'off'}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
