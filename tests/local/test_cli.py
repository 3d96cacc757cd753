"""The operator CLI (python -m chalicelib.cli) against the running stack."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

from chalicelib import cli
from tests.conftest import TEST_ADMIN_KEY
from tests.support import Api, unique


def run(stack, *argv, api_key=None, admin_key=TEST_ADMIN_KEY, as_json=True):
    out, err = io.StringIO(), io.StringIO()
    args = ["--url", stack.base_url] + (["--json"] if as_json else [])
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
    listed = data(run(stack, "org", "list"))
    # The first page (25, oldest first): other tests of the session may have filled it.
    assert org in [o["permalink"] for o in listed["organizations"]] or \
        listed["pagination"]["total"] > len(listed["organizations"])
    server = data(run(stack, "server", "create", org, "Main"))["server"]["permalink"]
    domain = f"{unique('cli')}.example.com"
    assert data(run(stack, "domain", "add", org, server, domain))["domain"]["name"] == domain

    code, out, _ = run(stack, "dns", org, server, domain, as_json=False)
    assert code == 0
    assert f"._domainkey.{domain}.\tIN\tTXT\t\"v=DKIM1" in out
    assert "v=spf1" in out and "; verification" in out
    assert f"rp.{domain}.\tIN\tCNAME\trp.mx.service.test.\t; return_path" in out
    records = data(run(stack, "dns", org, server, domain))["domain"]["dns_records"]
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

    code, out, _ = run(stack, "tail", "--iterations", "1", api_key=api_key, admin_key=None,
                       as_json=False)
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
    result = subprocess.run([sys.executable, "-m", "chalicelib.cli", "--json", "org", "list"],
                            capture_output=True, text=True, env=env, timeout=60,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__)))))
    assert result.returncode == 0, result.stderr
    assert "organizations" in json.loads(result.stdout)


def _zone_txt_strings(line: str) -> list[str]:
    """The character-strings of a zone-file TXT line, as a zone parser reads them."""
    rdata = line.split("\t")[3]
    return [part.replace('\\"', '"') for part in re.findall(r'"((?:[^"\\]|\\.)*)"', rdata)]


def test_dns_prints_zone_file_loadable_records(stack, tenant):
    code, out, err = run(stack, "dns", tenant.org, tenant.server, tenant.domain, as_json=False)
    assert code == 0, err
    records = data(run(stack, "dns", tenant.org, tenant.server, tenant.domain))
    dkim = records["domain"]["dns_records"]["dkim"]
    [line] = [line for line in out.splitlines() if line.endswith("; dkim")]
    strings = _zone_txt_strings(line)
    assert len(dkim["value"]) > 255 and len(strings) >= 2  # a 2048-bit key needs two
    assert all(len(s.encode()) <= 255 for s in strings)
    assert "".join(strings) == dkim["value"]  # resolvers concatenate them back
    # and a DNS library accepts the line as one TXT record with those strings
    import dns.rdata
    import dns.rdataclass
    import dns.rdatatype

    rdata = dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.TXT, line.split("\t")[3])
    assert b"".join(rdata.strings).decode() == dkim["value"]


def test_list_and_show_for_every_record_type(stack, api, tenant):
    from tests.support.sending import sent_ok

    org, server = tenant.org, tenant.server
    sent = sent_ok(api, tenant, subject=unique("cli-list"))
    Api.data(api.post(tenant.server_path + "/suppressions", {"address": "gone@example.net"}), 201)
    hook = Api.data(api.post(tenant.server_path + "/webhooks",
                             {"name": "h", "url": "http://127.0.0.1:9/hook"}), 201)["webhook"]
    template = Api.data(api.post("/api/v2/server/templates", {
        "name": "Welcome", "subject": "Hi", "text_body": "Hello"},
        server_key=tenant.api_key), 201)["template"]
    credential = data(run(stack, "credential", "list", org, server))["credentials"][0]
    message_id = sent["recipients"][0]["id"] if "recipients" in sent else sent["messages"][0]["id"]
    cases = [  # (argv, api key?, list key, show argv, shown record key, a value to see)
        (("server", "list", org), None, "servers", ("server", "show", org, server), "server",
         server),
        (("domain", "list", org, server), None, "domains",
         ("domain", "show", org, server, tenant.domain), "domain", tenant.domain),
        (("credential", "list", org, server), None, "credentials",
         ("credential", "show", org, server, str(credential["id"])), "credential",
         credential["name"]),
        (("suppression", "list", org, server), None, "suppressions",
         ("suppression", "show", org, server, "gone@example.net"), "suppression",
         "gone@example.net"),
        (("webhook", "list", org, server), None, "webhooks",
         ("webhook", "show", org, server, str(hook["id"])), "webhook", hook["url"]),
        (("message", "list"), tenant.api_key, "messages", ("message", "show", str(message_id)),
         "message", str(message_id)),
        (("template", "list"), tenant.api_key, "templates",
         ("template", "show", template["permalink"]), "template", template["permalink"]),
        (("org", "list"), None, "organizations", ("org", "show", org), "organization", org),
    ]
    for list_argv, key, plural, show_argv, singular, value in cases:
        admin = None if key else TEST_ADMIN_KEY
        # --json is the API's data object, unchanged. The stack's background runs (a domain's
        # scheduled DNS check, a message's delivery) may change a record between the two
        # reads: they are compared as of the same moment, read again when one moved.
        for _ in range(3):
            listed = data(run(stack, *list_argv, api_key=key, admin_key=admin))
            direct = Api.data(api.get(_api_path(list_argv, tenant), server_key=key)
                              if key else api.get(_api_path(list_argv, tenant)))
            if listed == direct:
                break
        assert listed == direct, list_argv
        assert set(listed) == {plural, "pagination"}
        shown = data(run(stack, *show_argv, api_key=key, admin_key=admin))
        assert set(shown) >= {singular} and value in json.dumps(shown), show_argv
        # without --json: a table with a header and a page line, and field lines for one
        code, text, err = run(stack, *list_argv, api_key=key, admin_key=admin, as_json=False)
        assert code == 0, err
        lines = text.splitlines()
        assert lines[0].split()[0].isupper() and lines[-1].startswith("page 1 of ")
        code, text, err = run(stack, *show_argv, api_key=key, admin_key=admin, as_json=False)
        assert code == 0 and value in text and not text.lstrip().startswith("{"), (show_argv, text)
    filtered = data(run(stack, "message", "list", "--status", "HardFail", "--per-page", "5",
                        api_key=tenant.api_key, admin_key=None))
    assert filtered["pagination"]["per_page"] == 5
    assert all(m["status"] == "HardFail" for m in filtered["messages"])


def _api_path(list_argv: tuple, tenant) -> str:
    from chalicelib.cli import RESOURCES_BY_COMMAND

    resource = RESOURCES_BY_COMMAND[list_argv[0]]
    return resource.path.format(org=tenant.org, server=tenant.server)


def test_tail_json_is_one_record_per_line(stack, tenant):
    run(stack, "send-test", "--from", f"ops@{tenant.domain}", "--to", "y@example.net",
        api_key=tenant.api_key)
    code, out, err = run(stack, "tail", "--iterations", "1", api_key=tenant.api_key,
                         admin_key=None)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert records and all({"id", "status", "rcpt_to"} <= set(r) for r in records)


def test_json_may_follow_the_command(stack, tenant):
    before = data(run(stack, "server", "list", tenant.org))
    code, out, err = run(stack, "server", "list", tenant.org, "--json", as_json=False)
    assert code == 0, err
    assert json.loads(out) == before


def test_user_create_prints_a_password_link_for_the_console(stack):
    email = f"{unique('op')}@example.com"
    created = data(run(stack, "user", "create", email, "--admin", "--first-name", "Op"))
    assert created["user"]["admin"] is True and created["user"]["has_password"] is False
    # The link opens the console's password page on this stack.
    assert created["password_reset"]["reset_url"].startswith(f"{stack.base_url}/password-reset/")


def test_bulk_counts_starts_and_waits_for_a_job(stack, api, tenant):
    from datetime import timedelta

    from chalicelib import clock

    tag = unique("cli")
    send_at = (clock.now() + timedelta(hours=1)).isoformat() + "Z"
    for _ in range(2):
        api.post("/api/v2/server/messages", {"from": f"app@{tenant.domain}", "tag": tag,
                                             "to": [f"{unique('c')}@recipient.example"],
                                             "text_body": "x", "send_at": send_at},
                 server_key=tenant.api_key)
    counted = data(run(stack, "bulk", "cancel", "--tag", tag, "--dry-run",
                       api_key=tenant.api_key))
    assert counted == {"dry_run": True, "action": "cancel", "matched": 2}
    job = data(run(stack, "bulk", "cancel", "--tag", tag, "--wait",
                   api_key=tenant.api_key))["job"]
    assert (job["status"], job["matched"], job["done"]) == ("Done", 2, 2)
    shown = data(run(stack, "bulk", "show", str(job["id"]), api_key=tenant.api_key))["job"]
    assert shown["id"] == job["id"] and shown["filter"] == {"tag": tag}
    code, _, err = run(stack, "bulk", "release", "--status", "Sent", api_key=tenant.api_key)
    assert code == 1 and "filter.status" in err
