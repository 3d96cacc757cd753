"""The gateway as a plain process (``python smtp-gateway/server.py``, the container's
entrypoint) and the container definition (no Docker engine here: checked as text)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.smtp import make_route, plain_client, simple_mail, tls_client
from tests.support import Api, free_port, wait_for

pytestmark = pytest.mark.usefixtures("clear_smtp_auth_failures")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_PY = os.path.join(ROOT, "smtp-gateway", "server.py")


def test_gateway_process_serves_checks_health_and_stores_mail(stack, api, tenant, tmp_path):
    make_route(api, tenant, "proc", mode="accept")
    port, tls_port = free_port(), free_port()
    env = {**os.environ, "SMTP_PORT": str(port), "SMTP_TLS_PORT": str(tls_port),
           "SMTP_SUBMISSION_PORTS": "", "HOST": "127.0.0.1"}
    proc = subprocess.Popen([sys.executable, SERVER_PY], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def healthy():
            return subprocess.run([sys.executable, SERVER_PY, "--check"], env=env,
                                  capture_output=True).returncode == 0
        wait_for(healthy, 30, interval=0.3, message="gateway process health check")
        with plain_client(port) as client:
            client.sendmail("x@sender.example", [f"proc@{tenant.domain}"],
                            simple_mail("x@sender.example", f"proc@{tenant.domain}", "Process"))
        with tls_client(tls_port) as client:
            client.login("u", tenant.smtp_key)
        subjects = [m["subject"] for m in Api.data(api.get(
            "/api/v2/server/inbound", server_key=tenant.api_key))["messages"]]
        assert subjects == ["Process"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0
    env_down = {**env, "SMTP_PORT": str(free_port())}
    assert subprocess.run([sys.executable, SERVER_PY, "--check"], env=env_down,
                          capture_output=True).returncode == 1


def test_dockerfile_pins_base_runs_unprivileged_with_healthcheck():
    with open(os.path.join(ROOT, "smtp-gateway", "Dockerfile")) as fh:
        text = fh.read()
    [base] = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    image, _, tag = base.partition(":")
    assert image == "python" and re.match(r"^\d+\.\d+\.\d+-", tag), base  # an exact version
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n?.*server\.py\", \"--check\"", text, re.MULTILINE)
    assert "COPY chalicelib/" in text and 'ENTRYPOINT ["python", "smtp-gateway/server.py"]' in text
