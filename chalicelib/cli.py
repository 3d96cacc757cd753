"""Operator command line over the HTTP API (it never touches the database directly, so it works
against any installation you can reach):

    python -m chalicelib.cli [--url URL] [--admin-key KEY] [--json] COMMAND ...

URL and keys default to EMAIL_SERVICE_URL, EMAIL_SERVICE_ADMIN_KEY and EMAIL_SERVICE_API_KEY
(prefer those, or the ``--api-key=KEY`` form: a key may begin with "-").
Commands: org create|list|show, server create|list|show, domain add|verify|list|show, dns,
credential create|list|show, message list|show, suppression list|show, webhook list|show,
template list|show, admin-key create, send-test, tail. ``--json`` prints the API answer's
``data`` object unchanged, for every command (``tail``: one message per line); without it the
output is for people (tables, ``field  value`` lines, zone-file lines for ``dns``).
Exit status: 0 success, 1 API error, 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, TextIO
from urllib.parse import quote, urlencode

from chalicelib import cli_output


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


ADMIN_SERVER = "/api/v2/admin/organizations/{org}/servers/{server}"


@dataclass(frozen=True)
class Resource:
    """A record type with ``list`` and ``show`` commands: where it lives and what a table
    shows of it (``--json`` shows everything the API answers)."""

    command: str
    plural: str                 # the list answer's key (and the path's last segment)
    scope: tuple[str, ...]      # positional arguments naming the parent (org, server)
    path: str                   # the list path, formatted with the scope
    ident: str                  # the positional argument of ``show``
    columns: tuple[str, ...]
    server_key: bool = False    # the server API (X-Server-API-Key) rather than the admin API
    filters: tuple[str, ...] = ()


RESOURCES = (
    Resource("org", "organizations", (), "/api/v2/admin/organizations", "org",
             ("permalink", "name", "time_zone", "created_at")),
    Resource("server", "servers", ("org",), "/api/v2/admin/organizations/{org}/servers",
             "server", ("permalink", "name", "mode", "suspended", "created_at")),
    Resource("domain", "domains", ("org", "server"), ADMIN_SERVER + "/domains", "name",
             ("name", "verified", "dkim_selector", "track_opens", "track_clicks")),
    Resource("credential", "credentials", ("org", "server"), ADMIN_SERVER + "/credentials",
             "id", ("id", "type", "name", "key_hint", "hold", "last_used_at")),
    Resource("suppression", "suppressions", ("org", "server"),
             ADMIN_SERVER + "/suppressions", "address",
             ("address", "reason", "source", "created_at", "expires_at")),
    Resource("webhook", "webhooks", ("org", "server"), ADMIN_SERVER + "/webhooks", "id",
             ("id", "name", "url", "enabled", "events")),
    Resource("message", "messages", (), "/api/v2/server/messages", "id",
             ("id", "status", "mail_from", "rcpt_to", "subject", "created_at"),
             server_key=True, filters=("scope", "status", "tag", "query", "stream")),
    Resource("template", "templates", (), "/api/v2/server/templates", "permalink",
             ("permalink", "name", "subject", "archived", "updated_at"), server_key=True),
)
RESOURCES_BY_COMMAND = {r.command: r for r in RESOURCES}


def tail(http: Http, out: TextIO, *, interval: float, iterations: int | None,
         per_page: int = 50, sleep: Callable[[float], None] = time.sleep,
         as_json: bool = False) -> None:
    """Print new messages, and status changes of those seen, until interrupted (``as_json``:
    each as its record on one line)."""
    seen: dict[int, str] = {}
    rounds = 0
    while iterations is None or rounds < iterations:
        data = http.call("GET", f"/api/v2/server/messages?per_page={per_page}", server=True)
        for message in sorted(data["messages"], key=lambda m: m["id"]):
            status = message.get("status", "")
            if seen.get(message["id"]) != status:
                if as_json:
                    cli_output.write(out, json.dumps(message, default=str))
                else:
                    prefix = "" if message["id"] not in seen else "~ "
                    cli_output.write(out, prefix + cli_output.message_line(message))
                seen[message["id"]] = status
        rounds += 1
        if iterations is None or rounds < iterations:
            sleep(interval)


def _subcommands(sub, cache: dict, name: str, help_text: str):
    if name not in cache:
        cache[name] = sub.add_parser(name, help=help_text).add_subparsers(dest="action",
                                                                          required=True)
    return cache[name]


def bulk(http: Http, args: argparse.Namespace, poll: float = 0.5) -> dict:
    """Start (or count, or show) a bulk job; --wait polls it until Done."""
    if args.action == "show":
        return http.call("GET", f"/api/v2/server/messages/bulk/{args.id}", server=True)
    flt = {name: getattr(args, name) for name in ("status", "tag", "stream", "rcpt_to",
                                                  "before", "after", "ids")
           if getattr(args, name) is not None}
    data = http.call("POST", "/api/v2/server/messages/bulk",
                     {"action": args.action, "filter": flt, "dry_run": args.dry_run}, server=True)
    while args.wait and "job" in data and data["job"]["status"] != "Done":
        time.sleep(poll)
        data = http.call("GET", f"/api/v2/server/messages/bulk/{data['job']['id']}",
                         server=True)
    return data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chalicelib.cli", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("EMAIL_SERVICE_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--admin-key", default=os.environ.get("EMAIL_SERVICE_ADMIN_KEY"))
    parser.add_argument("--api-key", default=os.environ.get("EMAIL_SERVICE_API_KEY"))
    parser.add_argument("--json", action="store_true",
                        help="print the API answer's data object as JSON (every command)")
    sub = parser.add_subparsers(dest="command", required=True)
    groups: dict = {}

    org = _subcommands(sub, groups, "org", "organizations")
    create = org.add_parser("create")
    create.add_argument("name")
    create.add_argument("--permalink")

    server = _subcommands(sub, groups, "server", "mail servers")
    create = server.add_parser("create")
    create.add_argument("org")
    create.add_argument("name")
    create.add_argument("--mode", choices=["Live", "Development"], default="Live")

    domain = _subcommands(sub, groups, "domain", "sending domains")
    for action in ("add", "verify"):
        cmd = domain.add_parser(action)
        cmd.add_argument("org")
        cmd.add_argument("server")
        cmd.add_argument("name")

    dns = sub.add_parser("dns", help="DNS records to publish for a domain (zone-file lines)")
    dns.add_argument("org")
    dns.add_argument("server")
    dns.add_argument("name")

    cred = _subcommands(sub, groups, "credential", "API/SMTP credentials")
    create = cred.add_parser("create")
    create.add_argument("org")
    create.add_argument("server")
    create.add_argument("--type", choices=["API", "SMTP", "SMTP-IP"], required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--ip-range")

    helps = {"message": "a server's messages (server API key)", "suppression": "suppressions",
             "webhook": "webhooks", "template": "templates (server API key)"}
    for resource in RESOURCES:
        group = _subcommands(sub, groups, resource.command, helps.get(resource.command, ""))
        listing = group.add_parser("list", help=f"list {resource.plural}")
        for name in resource.scope:
            listing.add_argument(name)
        listing.add_argument("--page", type=int)
        listing.add_argument("--per-page", type=int)
        for name in resource.filters:
            listing.add_argument(f"--{name}")
        show = group.add_parser("show", help=f"one of the {resource.plural}")
        for name in resource.scope + (resource.ident,):
            show.add_argument(name)

    key = sub.add_parser("admin-key", help="admin API keys").add_subparsers(dest="action", required=True)
    create = key.add_parser("create")
    create.add_argument("name")

    user = sub.add_parser("user", help="accounts of people (the console)").add_subparsers(dest="action", required=True)
    create = user.add_parser("create", help="create an account and print a link where its owner "
                                            "chooses a password (none goes on a command line)")
    create.add_argument("email")
    create.add_argument("--first-name", default="")
    create.add_argument("--last-name", default="")
    create.add_argument("--admin", action="store_true", help="an instance administrator")

    send = sub.add_parser("send-test", help="send a test message with a server API key")
    send.add_argument("--from", dest="from_", required=True)
    send.add_argument("--to", required=True, action="append")
    send.add_argument("--subject", default="Test message")
    send.add_argument("--text", default="This is a test message from the email service CLI.")

    bulk = sub.add_parser("bulk", help="bulk actions on messages (server API key)")
    bulk_sub = bulk.add_subparsers(dest="action", required=True)
    for name in ("release", "retry", "cancel"):
        cmd = bulk_sub.add_parser(name)
        for option in ("status", "tag", "stream", "rcpt-to", "before", "after"):
            cmd.add_argument(f"--{option}")
        cmd.add_argument("--id", dest="ids", type=int, action="append",
                         help="a message id (repeat the option for more)")
        cmd.add_argument("--dry-run", action="store_true", help="only count the matches")
        cmd.add_argument("--wait", action="store_true", help="poll the job until it is done")
    show = bulk_sub.add_parser("show")
    show.add_argument("id", type=int)

    follow = sub.add_parser("tail", help="follow a server's messages (server API key)")
    follow.add_argument("--interval", type=float, default=2.0)
    follow.add_argument("--iterations", type=int, help="stop after N polls (default: never)")
    _json_anywhere(parser)
    return parser


def _json_anywhere(parser: argparse.ArgumentParser) -> None:
    """``--json`` is accepted after the command too (``server list acme --json``): every
    leaf command takes it without a default of its own, so the global one stands otherwise."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                    _json_anywhere(child)
                else:
                    child.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                                       help="print the API answer's data object as JSON")


def _list_or_show(http: Http, resource: Resource, args: argparse.Namespace) -> dict:
    base = resource.path.format(**{name: quote(getattr(args, name), safe="")
                                   for name in resource.scope})
    if args.action == "show":
        ident = quote(str(getattr(args, resource.ident)), safe="")
        return http.call("GET", f"{base}/{ident}", server=resource.server_key)
    params = {name: getattr(args, name) for name in ("page", "per_page") + resource.filters
              if getattr(args, name) is not None}
    query = f"?{urlencode(params)}" if params else ""
    return http.call("GET", base + query, server=resource.server_key)


def run(args: argparse.Namespace, out: TextIO) -> Any:
    """Execute one command; returns the API's data to print (None when already printed)."""
    http = Http(args.url, args.admin_key, args.api_key)
    cmd, action = args.command, getattr(args, "action", None)
    if action in ("list", "show") and cmd in RESOURCES_BY_COMMAND:
        return _list_or_show(http, RESOURCES_BY_COMMAND[cmd], args)
    if cmd == "org":
        body = {"name": args.name, **({"permalink": args.permalink} if args.permalink else {})}
        return http.call("POST", "/api/v2/admin/organizations", body)
    if cmd == "server":
        return http.call("POST", f"/api/v2/admin/organizations/{args.org}/servers",
                         {"name": args.name, "mode": args.mode})
    base = ADMIN_SERVER.format(org=getattr(args, "org", ""), server=getattr(args, "server", ""))
    if cmd == "domain" and action == "add":
        return http.call("POST", base + "/domains", {"name": args.name})
    if cmd == "domain":
        return http.call("POST", base + f"/domains/{args.name}/verify")
    if cmd == "dns":
        data = http.call("GET", base + f"/domains/{args.name}")
        if args.json:
            return data
        cli_output.write(out, "\n".join(cli_output.zone_lines(data["domain"])))
        return None
    if cmd == "credential":
        body = {"type": args.type, "name": args.name,
                **({"ip_range": args.ip_range} if args.ip_range else {})}
        return http.call("POST", base + "/credentials", body)
    if cmd == "admin-key":
        return http.call("POST", "/api/v2/admin/admin_api_keys", {"name": args.name})
    if cmd == "user":
        # The same as the console's first run: the account, then a one-time link to the
        # console's password page (so no password is typed on a command line).
        created = http.call("POST", "/api/v2/admin/users", {
            "email_address": args.email, "first_name": args.first_name,
            "last_name": args.last_name, "admin": args.admin})
        user_id = created["user"]["id"]
        reset = http.call("POST", f"/api/v2/admin/users/{user_id}/password_reset")
        return {**created, **reset}
    if cmd == "send-test":
        return http.call("POST", "/api/v2/server/messages", {
            "from": args.from_, "to": args.to, "subject": args.subject,
            "text_body": args.text, "tag": "cli-test"}, server=True)
    if cmd == "bulk":
        return bulk(http, args)
    if cmd == "tail":
        tail(http, out, interval=args.interval, iterations=args.iterations, as_json=args.json)
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
        resource = RESOURCES_BY_COMMAND.get(args.command)
        columns = resource.columns if resource and args.action == "list" else None
        out.write((cli_output.as_json(data) if args.json
                   else cli_output.human(data, columns)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
