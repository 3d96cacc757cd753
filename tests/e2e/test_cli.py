"""The operator CLI (python -m chalicelib.cli) against the running stack."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from chalicelib import cli
from tests.conftest import TEST_ADMIN_KEY
from tests.support import unique


def run(stack, *argv, api_key=None, admin_key=TEST_ADMIN_KEY):
    out, err = io.StringIO(), io.StringIO()
    args = ["--url", stack.base_url]
    # Keys may begin with "-": the --opt=value form keeps argparse from reading an option.
    if admin_key:
        args.append(f"--admin-key={admin_key}")
    if api_key:
        args.append(f"--api-key={api_key}")
    code = cli.main(args + list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def data(result):
    code, out, err = result
    assert code == 0, err
    return json.loads(out)


def test_set_up_a_tenant_and_send(stack):
    org = data(run(stack, "org", "create", unique("Org")))["organization"]["permalink"]
    assert org in [o["permalink"] for o in data(run(stack, "org", "list"))["organizations"]]
    server = data(run(stack, "server", "create", org, "Main"))["server"]["permalink"]
    domain = f"{unique('cli')}.example.com"
    assert data(run(stack, "domain", "add", org, server, domain))["domain"]["name"] == domain

    code, out, _ = run(stack, "dns", org, server, domain)
    assert code == 0
    assert f"._domainkey.{domain}.\tIN\tTXT\t\"v=DKIM1" in out
    assert "v=spf1" in out and "; verification" in out
    records = data(run(stack, "--json", "dns", org, server, domain))
    assert set(records) >= {"spf", "dkim"}

    assert data(run(stack, "domain", "verify", org, server, domain))["domain"]["verified"]
    api_key = data(run(stack, "credential", "create", org, server, "--type", "API",
                       "--name", "cli"))["credential"]["key"]
    smtp = data(run(stack, "credential", "create", org, server, "--type", "SMTP",
                    "--name", "smtp"))["credential"]
    assert smtp["type"] == "SMTP" and smtp["key"]

    sent = data(run(stack, "send-test", "--from", f"ops@{domain}", "--to", "ann@example.net",
                    api_key=api_key, admin_key=None))
    assert sent["message_id"]

    code, out, _ = run(stack, "tail", "--iterations", "1", api_key=api_key, admin_key=None)
    assert code == 0 and "ann@example.net" in out and f"ops@{domain}" in out


def test_admin_key_creation_and_errors(stack):
    created = data(run(stack, "admin-key", "create", "ci"))["admin_api_key"]
    assert created["key"]
    # The new key works.
    assert data(run(stack, "org", "list", admin_key=created["key"]))
    code, _, err = run(stack, "org", "list", admin_key="wrong-key-0123456789")
    assert code == 1 and "Unauthorized" in err
    code, _, err = run(stack, "org", "list", admin_key=None)
    assert code == 2 and "EMAIL_SERVICE_ADMIN_KEY" in err
    code, _, err = run(stack, "dns", "no-org", "no-server", "x.example")
    assert code == 1 and "NotFound" in err


def test_tail_reports_status_changes(stack, tenant):
    from chalicelib import cli as cli_module

    http = cli_module.Http(stack.base_url, None, tenant.api_key)
    statuses = iter(["Pending", "Sent"])

    out = io.StringIO()
    original = http.call

    def call(method, path, body=None, *, server=False):
        data = original(method, path, body, server=server)
        status = next(statuses, "Sent")
        for m in data["messages"]:
            m["status"] = status
        return data

    http.call = call
    run(stack, "send-test", "--from", f"ops@{tenant.domain}", "--to", "z@example.net",
        api_key=tenant.api_key)
    cli_module.tail(http, out, interval=0, iterations=2, sleep=lambda s: None)
    lines = out.getvalue().splitlines()
    assert any("Pending" in line for line in lines)
    assert any(line.startswith("~ ") and "Sent" in line for line in lines)


def test_module_entry_point(stack):
    env = {**os.environ, "EMAIL_SERVICE_URL": stack.base_url,
           "EMAIL_SERVICE_ADMIN_KEY": TEST_ADMIN_KEY}
    result = subprocess.run([sys.executable, "-m", "chalicelib.cli", "org", "list"],
                            capture_output=True, text=True, env=env, timeout=60,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__)))))
    assert result.returncode == 0, result.stderr
    assert "organizations" in json.loads(result.stdout)
