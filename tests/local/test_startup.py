"""What `make run` (python -m chalicelib.local) says and does at start: every address the
banner prints answers; a changed ADMIN_API_KEY revokes the key seeded from the old one (and
the banner says so); a missing ENCRYPTION_KEY is warned about."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import requests

from tests.support import free_port, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD_KEY = "first-admin-key-0123456789"
NEW_KEY = "second-admin-key-0123456789"


def _start(tmp_path, admin_key: str, **extra):
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/startup.db",
           "DATABASE_OWNER_URL": "",
           "SIGNING_KEY_PATH": str(tmp_path / "signing.pem"), "ADMIN_API_KEY": admin_key,
           "PORT": str(port), "SMTP_PORT": str(free_port()), "SMTP_TLS_PORT": "0",
           "HOST": "127.0.0.1", **extra}
    proc = subprocess.Popen([sys.executable, "-m", "chalicelib.local"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    banner = []
    for line in proc.stdout:
        banner.append(line)
        if line.startswith("queue"):
            break
    return proc, port, banner


def _stop(proc) -> list[str]:
    proc.terminate()
    rest = proc.stdout.read()  # not communicate(timeout=): it bypasses the text buffer
    proc.wait(timeout=30)
    return rest.splitlines()


def _status(port: int, key: str) -> int:
    return requests.get(f"http://127.0.0.1:{port}/api/v2/admin/organizations",
                        headers={"X-Admin-API-Key": key}, timeout=10).status_code


def test_a_changed_admin_key_revokes_the_old_one_and_the_banner_says_so(tmp_path):
    proc, port, _ = _start(tmp_path, OLD_KEY)
    try:
        wait_for(lambda: _status(port, OLD_KEY) == 200, 30, message="first start")
    finally:
        first = _stop(proc)
    assert any("ENCRYPTION_KEY is not set" in line for line in first), first
    assert not any("was revoked" in line for line in first)

    proc, port, _ = _start(tmp_path, NEW_KEY)
    try:
        wait_for(lambda: _status(port, NEW_KEY) == 200, 30, message="second start")
        assert _status(port, OLD_KEY) == 401
    finally:
        second = _stop(proc)
    revoked = [line for line in second if "was revoked" in line]
    assert revoked and OLD_KEY[-4:] in revoked[0] and revoked[0].startswith("WARNING")


def test_no_encryption_key_warning_when_one_is_set(tmp_path):
    from cryptography.fernet import Fernet

    proc, port, _ = _start(tmp_path, OLD_KEY, ENCRYPTION_KEY=Fernet.generate_key().decode())
    try:
        wait_for(lambda: _status(port, OLD_KEY) == 200, 30, message="start")
    finally:
        lines = _stop(proc)
    assert not any("ENCRYPTION_KEY" in line for line in lines)


def test_every_address_the_banner_prints_answers(tmp_path):
    """It used to say `…/api/v2  (GET /health)`, and /api/v2/health is a 404."""
    proc, port, banner = _start(tmp_path, OLD_KEY)
    try:
        wait_for(lambda: _status(port, OLD_KEY) == 200, 30, message="start")
        urls = [u.rstrip(",)") for line in banner for u in re.findall(r"https?://\S+", line)
                if not u.endswith("…")]
        assert any(u.endswith("/health") for u in urls) and len(urls) >= 3, banner
        for url in urls:
            assert requests.get(url, timeout=10).status_code == 200, (url, banner)
    finally:
        _stop(proc)
