"""`make rehearse`: a deploy of this repository rehearsed end to end on a simulated AWS, offline
(a test tool; docs/deploying-rehearsal.md says what it proves and what it cannot).

Steps: the docker engine and images (images.py); a fresh PostgreSQL database behind a TLS
proxy standing in for RDS Proxy (dbproxy.py); moto in server mode (simulator.py); the account
an infra team starts from and the part of infra/template.yaml moto can create (account.py,
stack.py); infra/deploy.sh of the previous release (infra/rehearsal/PREVIOUS_RELEASE), the
scenario's first part against it, infra/deploy.sh of this tree over it, the rest of the
scenario (scenario.py), the deployed code checked against the built zip (verify.py); then a
report of what was created and what the simulator could not create.

Environment: DATABASE_URL (default: a fresh database email_service_rehearsal on
127.0.0.1:5432), DELIVERY_RELAY (default: the rehearsal's MX), WEBHOOKS_ALLOW_PRIVATE_TARGETS
(default true: the webhook receiver is on loopback), REHEARSE_SERVE=1 (leave it serving),
REHEARSE_TIME_SCALE (default 0.05: the sweeper's minute is 3 s).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT]

import dbproxy  # noqa: E402
import images  # noqa: E402
import simulator  # noqa: E402

DEFAULT_DATABASE = "postgresql+pg8000://postgres@127.0.0.1:5432/email_service_rehearsal"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def prepare_database(url: str, fresh: bool) -> dict:
    """The database's parts; a fresh one (dropped and created) for the default URL only."""
    import pg8000.native
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if (parsed.port or 5432) != 5432:
        raise SystemExit("DATABASE_URL: the functions' DATABASE_URL fixes port 5432")
    if fresh:
        admin = pg8000.native.Connection(parsed.username, host=parsed.host, port=5432,
                                         password=parsed.password, database="postgres")
        admin.run(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
        admin.run(f'CREATE DATABASE "{parsed.database}"')
        admin.close()
    return {"user": parsed.username, "password": parsed.password or "",
            "host": parsed.host, "name": parsed.database}


def start_simulator(image: str, log_dir: str) -> tuple[subprocess.Popen, str]:
    import requests

    port = free_port()
    log = open(os.path.join(log_dir, "simulator.log"), "w")
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "simulator.py"), "--port",
                                str(port), "--image", image], stdout=log, stderr=log,
                               start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            requests.get(endpoint + "/moto-api/", timeout=1)
            return process, endpoint
        except requests.RequestException:
            time.sleep(0.2)
    raise SystemExit("the simulator did not start (simulator.log)")


def main() -> int:
    started = time.monotonic()
    serve = os.environ.get("REHEARSE_SERVE", "") not in ("", "0")
    scale = float(os.environ.get("REHEARSE_TIME_SCALE", "0.05"))
    work = tempfile.mkdtemp(prefix="email-service-rehearsal-")
    print(f"rehearsal work directory: {work}")

    step("docker engine and images (built once, reused by content hash)")
    image = images.ensure_all()
    print(f"Lambda runtime image {image}")

    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE
    step(f"PostgreSQL {'(fresh) ' if url == DEFAULT_DATABASE else ''}behind the TLS proxy "
         f"standing in for RDS Proxy ({dbproxy.HOST}:5432)")
    database = prepare_database(url, fresh=url == DEFAULT_DATABASE)
    cert, key = images.database_certificate(image, work)
    proxy = dbproxy.DatabaseProxy(cert, key, (database["host"], 5432)).start()

    step("simulated AWS (moto server; Lambda in docker)")
    sim, endpoint = start_simulator(image, work)
    for line in simulator.PATCHES:
        print(f"  simulator change: {line}")
    import scenario

    run = scenario.Rehearsal(endpoint, work, database, scale, serve)
    try:
        run.everything(proxy)
        print(f"\nrehearsal passed in {time.monotonic() - started:.0f} s")
        if serve:
            run.serve_forever()
        return 0
    finally:
        run.stop()
        os.killpg(sim.pid, signal.SIGTERM)
        sim.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
