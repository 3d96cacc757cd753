"""Operator command line over the HTTP API (it never touches the database directly, so it works
against any installation you can reach):

    python -m chalicelib.cli [--url URL] [--admin-key KEY] [--json] COMMAND ...

URL and keys default to EMAIL_SERVICE_URL, EMAIL_SERVICE_ADMIN_KEY and EMAIL_SERVICE_API_KEY
(prefer those, or the ``--api-key=KEY`` form: a key may begin with "-").
Commands: org create|list, server create, domain add|verify, dns, credential create,
admin-key create, send-test, tail. Exit status: 0 success, 1 API error, 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, TextIO


class CliError(Exception):
    def __init__(self, code: str, message: str, status: int = 0):
        super().__init__(f"{code}: {message}" + (f" (HTTP {status})" if status else ""))
        self.code = code


class Http:
    def __init__(self, url: str, admin_key: str | None, api_key: str | None):
        import requests

        self.url = url.rstrip("/")
        self.admin_key = admin_key
        self.api_key = api_key
        self.session = requests.Session()

    def call(self, method: str, path: str, body: Any = None, *, server: bool = False) -> dict:
        import requests

        key_header, key = ("X-Server-API-Key", self.api_key) if server else \
            ("X-Admin-API-Key", self.admin_key)
        if not key:
            raise CliError("Usage", "set --api-key / EMAIL_SERVICE_API_KEY" if server else
                           "set --admin-key / EMAIL_SERVICE_ADMIN_KEY")
        try:
            resp = self.session.request(method, self.url + path, json=body, timeout=30,
                                        headers={key_header: key})
        except requests.RequestException as exc:
            raise CliError("ConnectionError", str(exc)) from None
        try:
            envelope = resp.json()
        except ValueError:
            raise CliError("InvalidResponse", resp.text[:200], resp.status_code) from None
        if envelope.get("status") != "success":
            error = envelope.get("error") or {}
            raise CliError(error.get("code", "Error"), error.get("message", ""), resp.status_code)
        return envelope["data"]


def _base(org: str, server: str) -> str:
    return f"/api/v2/admin/organizations/{org}/servers/{server}"


def _dns_lines(domain: dict) -> list[str]:
    lines = []
    for purpose, record in (domain.get("dns_records") or {}).items():
        lines.append(f"{record['name']}.\tIN\t{record['type']}\t\"{record['value']}\"\t; {purpose}")
    return lines


def _message_line(m: dict) -> str:
    return (f"{m.get('created_at', '')}  #{m['id']:<6} {m.get('status', ''):<9} "
            f"{m.get('mail_from', '')} -> {m.get('rcpt_to', '')}  {m.get('subject') or ''}")


def tail(http: Http, out: TextIO, *, interval: float, iterations: int | None,
         per_page: int = 50, sleep: Callable[[float], None] = time.sleep) -> None:
    """Print new messages, and status changes of those seen, until interrupted."""
    seen: dict[int, str] = {}
    rounds = 0
    while iterations is None or rounds < iterations:
        data = http.call("GET", f"/api/v2/server/messages?per_page={per_page}", server=True)
        for message in sorted(data["messages"], key=lambda m: m["id"]):
            status = message.get("status", "")
            if seen.get(message["id"]) != status:
                prefix = "" if message["id"] not in seen else "~ "
                out.write(prefix + _message_line(message) + "\n")
                out.flush()
                seen[message["id"]] = status
        rounds += 1
        if iterations is None or rounds < iterations:
            sleep(interval)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chalicelib.cli", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("EMAIL_SERVICE_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--admin-key", default=os.environ.get("EMAIL_SERVICE_ADMIN_KEY"))
    parser.add_argument("--api-key", default=os.environ.get("EMAIL_SERVICE_API_KEY"))
    parser.add_argument("--json", action="store_true", help="print the API's data as JSON")
    sub = parser.add_subparsers(dest="command", required=True)

    org = sub.add_parser("org", help="organizations").add_subparsers(dest="action", required=True)
    create = org.add_parser("create")
    create.add_argument("name")
    create.add_argument("--permalink")
    org.add_parser("list")

    server = sub.add_parser("server", help="mail servers").add_subparsers(dest="action", required=True)
    create = server.add_parser("create")
    create.add_argument("org")
    create.add_argument("name")
    create.add_argument("--mode", choices=["Live", "Development"], default="Live")

    domain = sub.add_parser("domain", help="sending domains").add_subparsers(dest="action", required=True)
    for action in ("add", "verify"):
        cmd = domain.add_parser(action)
        cmd.add_argument("org")
        cmd.add_argument("server")
        cmd.add_argument("name")

    dns = sub.add_parser("dns", help="DNS records to publish for a domain")
    dns.add_argument("org")
    dns.add_argument("server")
    dns.add_argument("name")

    cred = sub.add_parser("credential", help="API/SMTP credentials").add_subparsers(dest="action", required=True)
    create = cred.add_parser("create")
    create.add_argument("org")
    create.add_argument("server")
    create.add_argument("--type", choices=["API", "SMTP", "SMTP-IP"], required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--ip-range")

    key = sub.add_parser("admin-key", help="admin API keys").add_subparsers(dest="action", required=True)
    create = key.add_parser("create")
    create.add_argument("name")

    send = sub.add_parser("send-test", help="send a test message with a server API key")
    send.add_argument("--from", dest="from_", required=True)
    send.add_argument("--to", required=True, action="append")
    send.add_argument("--subject", default="Test message")
    send.add_argument("--text", default="This is a test message from the email service CLI.")

    follow = sub.add_parser("tail", help="follow a server's messages (server API key)")
    follow.add_argument("--interval", type=float, default=2.0)
    follow.add_argument("--iterations", type=int, help="stop after N polls (default: never)")
    return parser


def run(args: argparse.Namespace, out: TextIO) -> Any:
    """Execute one command; returns the data to print (None when already printed)."""
    http = Http(args.url, args.admin_key, args.api_key)
    cmd, action = args.command, getattr(args, "action", None)
    if cmd == "org" and action == "create":
        body = {"name": args.name, **({"permalink": args.permalink} if args.permalink else {})}
        return http.call("POST", "/api/v2/admin/organizations", body)
    if cmd == "org":
        return http.call("GET", "/api/v2/admin/organizations")
    if cmd == "server":
        return http.call("POST", f"/api/v2/admin/organizations/{args.org}/servers",
                         {"name": args.name, "mode": args.mode})
    if cmd == "domain" and action == "add":
        return http.call("POST", _base(args.org, args.server) + "/domains", {"name": args.name})
    if cmd == "domain":
        return http.call("POST", _base(args.org, args.server) + f"/domains/{args.name}/verify")
    if cmd == "dns":
        data = http.call("GET", _base(args.org, args.server) + f"/domains/{args.name}")
        if args.json:
            return data["domain"]["dns_records"]
        out.write("\n".join(_dns_lines(data["domain"])) + "\n")
        return None
    if cmd == "credential":
        body = {"type": args.type, "name": args.name,
                **({"ip_range": args.ip_range} if args.ip_range else {})}
        return http.call("POST", _base(args.org, args.server) + "/credentials", body)
    if cmd == "admin-key":
        return http.call("POST", "/api/v2/admin/admin_api_keys", {"name": args.name})
    if cmd == "send-test":
        return http.call("POST", "/api/v2/server/messages", {
            "from": args.from_, "to": args.to, "subject": args.subject,
            "text_body": args.text, "tag": "cli-test"}, server=True)
    if cmd == "tail":
        tail(http, out, interval=args.interval, iterations=args.iterations)
        return None
    raise CliError("Usage", f"unknown command {cmd}")


def main(argv: list[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    args = build_parser().parse_args(argv)
    try:
        data = run(args, out)
    except CliError as exc:
        err.write(f"error: {exc}\n")
        return 2 if exc.code == "Usage" else 1
    except KeyboardInterrupt:
        return 0
    if data is not None:
        out.write(json.dumps(data, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
