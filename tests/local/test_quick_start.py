"""The README's quick start, pasted as a newcomer would: `make run`'s process (the local stack
with its defaults: captured mail, text logs) and the marked shell block run top to bottom with
bash (-e, pipefail), twice (a second paste must work too). Only the ports are changed, since
tests never take 8000/2525."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

import requests

from tests.support import free_port, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = "<!-- quick-start:"
ADMIN_KEY = "change-me-to-a-long-secret"


def quick_start_block() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    after = readme[readme.index(MARK):]
    match = re.search(r"```sh\n(.*?)\n```", after, re.DOTALL)
    return match.group(1)


def test_the_first_terminal_command_is_what_this_test_starts():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    assert f"ADMIN_API_KEY={ADMIN_KEY} make run" in readme
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as fh:
        assert "$(PY) -m chalicelib.local" in fh.read()


def test_the_quick_start_runs_top_to_bottom(tmp_path):
    http_port, smtp_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DELIVERY_RELAY", "LOG_FORMAT", "CAPTURE_DIR", "METRICS_BACKEND",
                        "TIME_SCALE", "DATABASE_URL", "DATABASE_OWNER_URL")}
    env.update(PORT=str(http_port), SMTP_PORT=str(smtp_port), ADMIN_API_KEY=ADMIN_KEY,
               SIGNING_KEY_PATH=str(tmp_path / "var" / "signing_key.pem"),
               DATABASE_URL=f"sqlite:///{tmp_path}/var/email-service.db", PYTHONPATH=ROOT,
               SMTP_HOSTNAME="localhost")
    (tmp_path / "var").mkdir()
    stack = subprocess.Popen([sys.executable, "-m", "chalicelib.local"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(iter(stack.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        wait_for(lambda: _healthy(http_port) and "logs " in "".join(output), 60,
                 message="the stack to answer /health and print its banner")
        banner = "".join(output)
        assert "outgoing     captured in the console's Captured mail page and " \
            "var/captured/<token>.eml" in banner
        # A loopback HOST is printed as localhost: the console's passkeys work there.
        assert f"console      http://localhost:{http_port}/  (open it" in banner
        assert f"metrics      http://localhost:{http_port}/metrics" in banner
        # The SPF record every return path needs (issue 32): rp.<SMTP_HOSTNAME>'s.
        assert "return path  <token>@rp.localhost (tenants' return-path CNAMEs lead there): " \
            'before delivering for real publish rp.localhost TXT "v=spf1 include:spf.localhost ' \
            '~all" and the sending addresses at spf.localhost' in banner
        block = quick_start_block().replace("localhost:8000", f"localhost:{http_port}") \
            .replace('"localhost", 2525', f'"localhost", {smtp_port}')
        for paste in (1, 2):
            result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=tmp_path,
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, f"paste {paste}:\n{result.stdout}\n{result.stderr}"
            out = result.stdout
            assert re.search(r"^message \d+ is Sent$", out, re.MULTILINE), out
            assert "captured (DELIVERY_RELAY=capture), not sent" in out
            assert "DKIM-Signature:" in out and "accepted over SMTP" in out
            assert re.search(r"^email_service_sent_total [1-9]", out, re.MULTILINE), out
        captured = tmp_path / "var" / "captured"
        wait_for(lambda: len(list(captured.glob("*.eml"))) == 4, 20,
                 message="two HTTP and two SMTP messages captured")
        smtp_copy = [p for p in captured.glob("*.eml") if b"Subject: Over SMTP" in p.read_bytes()]
        assert len(smtp_copy) == 2
        lines = "".join(output)
        assert re.search(r"delivery\.attempt message_id=\d+ .*host=capture .*code=250", lines)
        assert "submission.accepted" in lines and ADMIN_KEY not in lines
    finally:
        stack.send_signal(signal.SIGINT)
        try:
            stack.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stack.kill()
            stack.wait()
    assert stack.returncode == 0, "".join(output)[-3000:]


def _healthy(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False
