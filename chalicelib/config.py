"""Typed settings, read lazily from the environment.

Every key of the spec has a dotted name (``auth.max_login_attempts``) and an environment
variable derived from it (``AUTH_MAX_LOGIN_ATTEMPTS``). Operational settings (``DATABASE_URL``,
``PORT``...) are plain environment variables. Nothing is read at import time: Chalice's test
client and Lambda both set the environment after our modules are imported, so callers use
``get_settings()`` and the cache is refreshed whenever the environment changes.

Longer than our ~500-line rule on purpose: it is the one table of every key with its default,
parser and description (docs/configuration.md is checked against it), and a key split into
several files would be a key someone cannot find.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|k|mb|m|gb|g)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {None: 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2,
                 "g": 1024**3, "gb": 1024**3}


def _parse_size(raw: str) -> int:
    match = _SIZE.match(raw)
    if not match:
        raise ValueError(f"expected a size such as 14MB or 10485760, got {raw!r}")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _SIZE_FACTORS[unit]


DATABASE_SSL_MODES = ("off", "require", "verify")
LOG_FORMATS = ("json", "text")
METRICS_BACKENDS = ("prometheus", "emf", "off")


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value
    return parse


_parse_log_format = _choice(LOG_FORMATS)
IP_POOL_EGRESS_MODES = ("auto", "direct", "relay")
_parse_ip_pool_egress = _choice(IP_POOL_EGRESS_MODES)
_parse_metrics_backend = _choice(METRICS_BACKENDS)


def _parse_resolvers(raw: str) -> str:
    """``host[:port],...`` with IP addresses (IPv6 as ``[::1]:53``); normalized, or ValueError."""
    from ipaddress import ip_address

    parts = []
    for item in filter(None, (x.strip() for x in raw.split(","))):
        host, port = item, "53"
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest.lstrip(":") or "53"
        elif item.count(":") == 1:
            host, port = item.split(":")
        try:
            ip_address(host)
            number = int(port)
        except ValueError:
            raise ValueError(f"expected IP addresses as host[:port],..., got {item!r}") from None
        if not 0 < number < 65536:
            raise ValueError(f"port out of range in {item!r}")
        parts.append(f"[{host}]:{number}" if ":" in host else f"{host}:{number}")
    return ",".join(parts)


def _parse_networks(raw: str) -> str:
    """``address-or-CIDR,...`` (a bare address is its own /32 or /128); normalized, or ValueError."""
    from ipaddress import ip_network

    parts = []
    for item in filter(None, (x.strip() for x in raw.split(","))):
        try:
            parts.append(str(ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"expected IP addresses or CIDR ranges (10.0.0.0/16,...), got {item!r}") \
                from None
    return ",".join(parts)


def _parse_address_map(raw: str) -> str:
    """``public=local,...`` IP address pairs of one family each; normalized, or ValueError."""
    from ipaddress import ip_address

    parts = []
    for item in filter(None, (x.strip() for x in raw.split(","))):
        public, sep, local = item.partition("=")
        try:
            pair = ip_address(public.strip()), ip_address(local.strip())
        except ValueError:
            pair = None
        if not sep or pair is None or pair[0].version != pair[1].version:
            raise ValueError(f"expected public=local IP address pairs of one family, got {item!r}")
        parts.append(f"{pair[0]}={pair[1]}")
    return ",".join(parts)


def _parse_ssl_mode(raw: str) -> str:
    value = raw.strip().lower()
    if value not in DATABASE_SSL_MODES:
        raise ValueError(f"expected one of {', '.join(DATABASE_SSL_MODES)}, got {raw!r}")
    return value


@dataclass(frozen=True)
class Key:
    """One configuration key: its attribute, environment variable, default and meaning."""

    attr: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    spec_key: str | None = None
    shown_default: str | None = None  # the docs' default when it depends on the machine


def _spec(dotted: str, default: Any, parse: Callable[[str], Any], doc: str) -> Key:
    attr = dotted.replace(".", "_")
    return Key(attr, attr.upper(), default, parse, doc, dotted)


def _env(name: str, default: Any, parse: Callable[[str], Any], doc: str,
         shown_default: str | None = None) -> Key:
    return Key(name.lower(), name, default, parse, doc, shown_default=shown_default)


# The reserved names that RESERVED_DOMAINS_ALLOWED may list (services/domains/reserved.py
# refuses every reserved name else): the documentation names (RFC 2606), whose addresses
# validate but are never delivered. Any other reserved name could not take effect.
DOCUMENTATION_DOMAINS = ("example", "example.com", "example.net", "example.org")


def _parse_allowed_reserved(raw: str) -> str:
    """RESERVED_DOMAINS_ALLOWED: a comma-separated subset of DOCUMENTATION_DOMAINS (a name
    that could not take effect is a configuration error, not silently ignored)."""
    names = [n.strip().lower().rstrip(".") for n in raw.split(",") if n.strip()]
    wrong = [n for n in names if n not in DOCUMENTATION_DOMAINS]
    if wrong:
        raise ValueError(f"{', '.join(wrong)} cannot be allowed; only "
                         f"{', '.join(sorted(DOCUMENTATION_DOMAINS))} (addresses at the other "
                         "reserved names never validate)")
    return ",".join(names)


_RULE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_RULE_FIELDS = {"name", "domains", "mx", "connections", "per_minute"}


def _parse_pacing_rules(raw: str) -> str:
    """DELIVERY_PACING_RULES: a JSON list of {name, domains, mx, connections, per_minute}
    (services/delivery/pacing.py reads them); checked here so a mistake stops the start, and
    kept as normalized JSON."""
    import json

    if not raw.strip():
        return ""
    try:
        rules = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(rules, list):
        raise ValueError("expected a JSON list of rules")
    names = set()
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("name"), str) or \
                not _RULE_NAME.match(rule["name"]):
            raise ValueError("each rule needs a name of lower-case letters, digits, - or _ "
                             f"(no dots: it must not look like a domain): {rule!r}")
        if rule["name"] in names:
            raise ValueError(f"rule {rule['name']!r} is given twice")
        names.add(rule["name"])
        unknown = set(rule) - _RULE_FIELDS
        if unknown:
            raise ValueError(f"rule {rule['name']!r}: unknown field(s) {', '.join(sorted(unknown))}")
        for field in ("domains", "mx"):
            value = rule.get(field, [])
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip()
                                                      for v in value):
                raise ValueError(f"rule {rule['name']!r}: {field} must be a list of names")
        for field, least in (("connections", 1), ("per_minute", 0)):
            value = rule.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < least):
                raise ValueError(f"rule {rule['name']!r}: {field} must be a whole number "
                                 f"of at least {least}")
    return json.dumps(rules, sort_keys=True)


REPUTATION_GUARD_MODES = ("pause", "warn", "off")
_parse_reputation_guard = _choice(REPUTATION_GUARD_MODES)


def _percent(raw: str) -> float:
    value = float(raw)
    if not 0 <= value <= 100:
        raise ValueError(f"expected a percentage from 0 to 100, got {raw!r}")
    return value


def _at_least(least: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if value < least:
            raise ValueError(f"expected at least {least}, got {value}")
        return value
    return parse


MB = 1024 * 1024

KEYS: tuple[Key, ...] = (
    # Spec keys (defaults from the spec, or DESIGN.md where the spec says "not shown").
    _spec("auth.session_timeout_days", 14, int, "Session lifetime in days."),
    _spec("auth.max_login_attempts", 5, int, "Failed logins before the account is locked."),
    _spec("auth.lockout_minutes", 15, int, "How long a locked account stays locked."),
    _spec("auth.minimum_password_length", 8, int, "Minimum password length (registration, reset, change)."),
    _spec("auth.allow_registration", False, _parse_bool, "Allow self-registration."),
    _spec("auth.allow_organization_creation", True, _parse_bool, "Allow signed-in users to create organizations."),
    _spec("auth.frontend_url", "", str, "Where password-reset, invitation and SSO links point; empty: the console served at PUBLIC_URL (http://localhost:PORT locally)."),
    _spec("password_reset_expiry_hours", 2, int, "Password reset token lifetime in hours."),
    _spec("invitation_expiry_days", 7, int, "Invitation lifetime in days."),
    _spec("smtp_server.max_message_size", 14 * MB, _parse_size,
          "Largest message accepted over HTTP or SMTP, in bytes (suffixes KB/MB/GB accepted)."),
    _spec("auth.oidc.enabled", False, _parse_bool, "Enable OpenID Connect single sign-on."),
    _spec("auth.oidc.issuer", "", str, "OIDC issuer URL (discovery at /.well-known/openid-configuration)."),
    _spec("auth.oidc.client_id", "", str, "OIDC client id."),
    _spec("auth.oidc.client_secret", "", str, "OIDC client secret (empty for public clients)."),
    _spec("auth.oidc.redirect_uri", "", str, "The callback URL registered at the provider (…/api/v2/auth/oidc/callback)."),
    # Operational settings.
    _env("DATABASE_URL", "sqlite:///var/email-service.db", str,
         "SQLAlchemy URL the service connects with. PostgreSQL: "
         "postgresql+pg8000://user:pass@host/db, a role bound by row-level security (not "
         "the tables' owner: see DATABASE_OWNER_URL)."),
    _env("DATABASE_OWNER_URL", "", str,
         "PostgreSQL: the same database as DATABASE_URL, as the role that owns the tables; "
         "migrations run as it, and it creates DATABASE_URL's role (user and password "
         "from DATABASE_URL) and grants it row access. Empty: migrations use DATABASE_URL "
         "(SQLite, or one role; on PostgreSQL the start warns when that role could bypass "
         "row-level security)."),
    _env("DATABASE_SSL", "off", _parse_ssl_mode,
         "TLS to PostgreSQL: off (a plain connection: TLS is not even asked for); require "
         "(encrypted, certificate not checked); verify (certificate and host name checked "
         "against DATABASE_SSL_CA or the system CAs)."),
    _env("DATABASE_SSL_CA", "", str,
         "PEM CA bundle for DATABASE_SSL=verify; empty: the system CAs (RDS Proxy's "
         "certificates chain to them)."),
    _env("PORT", 8000, int, "HTTP API port of the local stack."),
    _env("SMTP_PORT", 2525, int, "SMTP gateway port of the local stack."),
    _env("SMTP_SUBMISSION_PORTS", "", str,
         "More plain+STARTTLS listener ports of the gateway, comma-separated (the container: 25,587)."),
    _env("SMTP_TLS_PORT", 0, int, "Implicit-TLS listener port of the gateway (465); 0 turns it off."),
    _env("SMTP_TLS_CERT_PATH", "", str,
         "PEM certificate (chain) of the gateway; empty: a self-signed one generated beside SIGNING_KEY_PATH."),
    _env("SMTP_TLS_KEY_PATH", "", str, "PEM private key of SMTP_TLS_CERT_PATH."),
    _env("SMTP_AUTH_REQUIRE_TLS", True, _parse_bool, "Offer AUTH only on TLS connections."),
    _env("SMTP_AUTH_MAX_FAILURES", 5, int,
         "Failed AUTH attempts per client address (in the window) before AUTH is refused."),
    _env("SMTP_AUTH_FAILURE_WINDOW_SECONDS", 900.0, float,
         "Window over which failed AUTH attempts of a client address are counted."),
    _env("SMTP_AUTH_FAILURE_DELAY_SECONDS", 0.5, float,
         "Delay added per counted failure before answering a failed AUTH (slows guessing)."),
    _env("SMTP_MAX_RECIPIENTS", 100, int, "Recipients accepted per SMTP transaction."),
    _env("SMTP_COMMIT_PROCESS", True, _parse_bool,
         "The gateway commits received mail in a child process of its own (a GIL apart from "
         "the connections' event loop); false: in a thread of the gateway's process."),
    _env("SMTP_ROUTE_CACHE_SECONDS", 5.0, float,
         "How long the gateway reuses the inbound route it found for a recipient address; a "
         "route's change or removal reaches the gateway within this time. 0: look up every RCPT."),
    _env("INBOUND_MAX_ATTEMPTS", 10, int, "Delivery attempts of an inbound message to its endpoint."),
    _env("INBOUND_TIMEOUT_SECONDS", 30.0, float, "Per-attempt timeout of an endpoint delivery."),
    _env("HOST", "127.0.0.1", str, "Address the local stack listens on."),
    _env("ADMIN_API_KEY", "", str, "When set, seeded at start as an admin API key so operators can begin; a key seeded from an earlier, different value is revoked (the banner and the migrate step's answer say so)."),
    _env("SIGNING_KEY_PATH", "var/signing_key.pem", str,
         "Installation RSA-2048 key (PEM); signs webhooks. Generated on first start when missing."),
    _env("ENCRYPTION_KEY", "", str,
         "Fernet key(s), comma-separated, first encrypts; encrypts secrets at rest. "
         "Empty: derived from the signing key (every start warns about it)."),
    _env("DELIVERY_RELAY", "", str,
         "host:port of a smarthost; empty or mx: the recipient domain's MX hosts; capture: "
         "nothing leaves the machine, each message is kept under CAPTURE_DIR and recorded as "
         "Sent (what `make run` uses unless DELIVERY_RELAY is set)."),
    _env("TIME_SCALE", 1.0, float, "Factor applied to every scheduled delay (0.001 turns hours into seconds)."),
    _env("WEBHOOKS_ALLOW_PRIVATE_TARGETS", False, _parse_bool,
         "Allow webhook and endpoint URLs, and MTA-STS policy hosts, that resolve to loopback "
         "or private addresses."),
    _env("WEBHOOKS_TIMEOUT_SECONDS", 15.0, float, "Per-attempt timeout of a webhook delivery."),
    _env("WEBHOOKS_CONCURRENCY", 40, _at_least(1),
         "Webhook POSTs in flight at once per worker process (per Lambda container): a batch's "
         "rows go out together over keep-alive connections per receiver, one message's events "
         "to one webhook still one after another. 1: each worker thread posts its batch one "
         "row at a time (the behaviour before)."),
    _env("DELIVERY_MAX_ATTEMPTS", 18, int, "Delivery attempts of an outgoing message before HardFail."),
    _env("DELIVERY_RETRY_SCHEDULE", "", str,
         "Comma-separated retry delays in minutes; empty means the built-in schedule (~2 days)."),
    _env("DELIVERY_TIMEOUT_SECONDS", 60.0, float, "Socket timeout of an SMTP delivery attempt."),
    _env("DELIVERY_PACING_CONNECTIONS", 20, _at_least(1),
         "Connections open at once to one destination (a recipient domain) from one IP "
         "pool, across every worker, unless a pacing rule says otherwise."),
    _env("DELIVERY_PACING_PER_MINUTE", 0, _at_least(0),
         "Messages a minute to one destination from one IP pool unless a pacing rule says "
         "otherwise; 0: no limit."),
    _env("DELIVERY_PACING_RULES", "", _parse_pacing_rules,
         "Pacing rules as a JSON list of {name, domains, mx, connections, per_minute}: the "
         "recipient domains (or MX host suffixes) one destination covers and its limits; a "
         "rule named like a built-in one (google, microsoft, yahoo, apple) replaces its "
         "fields. See docs/api.md#per-destination-pacing."),
    _env("DELIVERY_PACING_BACKOFF_SECONDS", 60.0, float,
         "How long every worker stays away from a destination after it answered a throttle "
         "reply (421 or 4.7.x); doubled for each further throttle in a row."),
    _env("DELIVERY_PACING_BACKOFF_MAX_SECONDS", 3600.0, float,
         "The longest a destination's backoff grows to."),
    _env("DELIVERY_MX_PORT", 25, int,
         "TCP port MX hosts are dialled on. Only test rigs and lab set-ups change it (the "
         "tests' receiving MX listens on a free port of loopback)."),
    _env("IP_POOL_EGRESS", "auto", _parse_ip_pool_egress,
         "How a server's IP pool sends: auto (bind the pool's addresses this host owns; when "
         "it owns none, hand the mail to the pool's relay_host); direct (always bind, never "
         "relay: the outbound relay itself); relay (always the pool's relay_host: workers "
         "behind NAT, e.g. Lambda). A pool with no usable address defers its mail."),
    _env("IP_POOL_BIND_ADDRESSES", "", _parse_address_map,
         "public=local address pairs, comma-separated: on a host behind one-to-one NAT (an "
         "EC2 instance, whose Elastic IPs map to private addresses) the local address to bind "
         "for an IP pool address; the pool lists the public one (its reverse DNS)."),
    _env("MTA_STS_CA_BUNDLE", "", str,
         "PEM CA bundle MTA-STS trusts: the policy host's HTTPS certificate and, under an "
         "enforce policy, the MX hosts' certificates; empty: the system's CAs."),
    _env("MTA_STS_PORT", 443, int,
         "Port of https://mta-sts.<domain>/ policy fetches. Only test rigs change it."),
    _env("MTA_STS_CHECK_INTERVAL_SECONDS", 60.0, float,
         "How long a worker reuses what it learned of a recipient domain's MTA-STS policy "
         "(its _mta-sts TXT id and the cached policy) before looking again; 0: every delivery."),
    _env("OUTBOUND_RELAY_PORT", 0, int,
         "The gateway's outbound-relay listener (0: off): relays the service's own outgoing "
         "mail from the IP pool addresses this host owns, for workers that own none."),
    _env("OUTBOUND_RELAY_CLIENTS", "", _parse_networks,
         "Networks (CIDR, comma-separated) allowed to use the outbound-relay listener, e.g. "
         "the workers' private subnets; empty: loopback only."),
    _env("WEBHOOK_LOG_RETENTION_DAYS", 30, int, "How long webhook attempt logs are kept."),
    _env("RETENTION_INTERVAL_SECONDS", 3600.0, float,
         "How often the local stack prunes expired rows (AWS: an hourly schedule)."),
    _env("SUPPRESSION_EXPIRY_DAYS", 30, int, "How long a hard-failed recipient stays suppressed."),
    _env("SUPPRESSION_REPEAT_FAILURES", 3, int,
         "A failure that may pass (mailbox full or disabled, a relay's expiry) suppresses its "
         "recipient only once it is repeated this many times (docs/api.md, suppression policy)."),
    _env("SUPPRESSION_REPEAT_DAYS", 15, int,
         "...and only when those failures span at least this many days, none more than this "
         "many days after the one before (a longer quiet spell starts the count again)."),
    _env("REPUTATION_GUARD", "pause", _parse_reputation_guard,
         "The reputation guard of every server (docs/api.md#reputation-guard): pause (warn, "
         "and suspend a server's sending at a pause threshold until an instance admin lifts "
         "it); warn (warnings only); off (nothing evaluated; the figures are still shown)."),
    _env("REPUTATION_WINDOW_HOURS", 168, _at_least(1),
         "The guard's sliding window: bounce and complaint rates of the mail sent in the "
         "last this many hours (whole UTC hours)."),
    _env("REPUTATION_MIN_VOLUME", 1000, _at_least(1),
         "Messages a server must have sent in the window before the guard judges its rates "
         "(no warning or pause on a small sample)."),
    _env("REPUTATION_BOUNCE_WARNING_PERCENT", 5.0, _percent,
         "Bounce rate (bounces that say the address is bad, per message sent) at which a "
         "server is warned."),
    _env("REPUTATION_BOUNCE_PAUSE_PERCENT", 10.0, _percent,
         "Bounce rate at which a server's sending is paused."),
    _env("REPUTATION_COMPLAINT_WARNING_PERCENT", 0.1, _percent,
         "Complaint rate (spam complaints per message delivered) at which a server is warned."),
    _env("REPUTATION_COMPLAINT_PAUSE_PERCENT", 0.5, _percent,
         "Complaint rate at which a server's sending is paused."),
    _env("INFRASTRUCTURE_SIGNAL_WINDOW_HOURS", 24, _at_least(1),
         "How far back an IP address's, an IP pool's and a domain's health counts the "
         "refusals that blamed them (block lists, reputation, reverse DNS, authentication)."),
    _env("INFRASTRUCTURE_SIGNAL_RETENTION_DAYS", 30, _at_least(1),
         "How long those refusals are kept (GET /api/v2/admin/infrastructure_signals)."),
    _env("SMTP_HOSTNAME", "localhost", str,
         "Public hostname of the installation: Message-IDs, EHLO, DNS records, return paths."),
    _env("RETURN_PATH_DOMAIN", "", str,
         "Domain of per-message return-path addresses, which tenants' return-path CNAMEs "
         "point at; empty: rp.<SMTP_HOSTNAME>. Publish its SPF record, v=spf1 "
         "include:<SPF_INCLUDE> ~all (receivers evaluate every return path's SPF there), and "
         "an MX to the gateway."),
    _env("FBL_ADDRESSES", "", str,
         "Comma-separated addresses the gateway accepts feedback (ARF) reports at, as registered "
         "with mailbox providers' feedback loops; reports to a return-path address are always read."),
    _env("DMARC_REPORT_ADDRESS", "", str,
         "The mailbox DMARC aggregate reports come to: each domain's suggested DMARC record asks "
         "for them at <local>+<domain token>@<its domain>. Empty: dmarc@<RETURN_PATH_DOMAIN>. "
         "Its domain's MX must be this gateway."),
    _env("DMARC_REPORT_MAX_BYTES", 20 * MB, _parse_size,
         "Largest DMARC report accepted, uncompressed (a gzip or zip attachment that inflates "
         "past it is refused)."),
    _env("DMARC_KNOWN_SOURCES", "", _parse_networks,
         "Sending addresses that are ours besides the IP pools' and the relay's (a NAT gateway, "
         "a smarthost's outbound range): IP addresses or CIDR ranges, comma-separated. DMARC "
         "report sources in them are shown as ours."),
    _env("DMARC_REPORT_RETENTION_DAYS", 400, int,
         "How long received DMARC reports are kept."),
    _env("SPF_INCLUDE", "", str, "SPF include published for tenant domains; empty: spf.<SMTP_HOSTNAME>."),
    _env("DKIM_SELECTOR", "mail", str, "Selector of tenant domains' DKIM records (<selector>._domainkey)."),
    _env("DNS_RESOLVERS", "", _parse_resolvers,
         "Resolvers for every DNS lookup (MX and the MX hosts' A/AAAA, relay hosts, MTA-STS "
         "records and policy hosts, verification, domain checks, webhook and endpoint "
         "hosts): IP addresses as host[:port], comma-separated; empty: the system's."),
    _env("DNS_CACHE_MAX_SECONDS", 300.0, float,
         "Delivery's DNS answers (MX, the MX hosts' A/AAAA) are kept in each process for "
         "their TTL, at most this long (0: every delivery asks the resolver). Negative "
         "answers (but an MX host's missing A or AAAA), verification, domain checks and "
         "MTA-STS records always ask afresh."),
    _env("DNS_TIMEOUT_SECONDS", 5.0, float,
         "How long a verification or domain-check lookup may take before it counts as an error."),
    _env("DOMAIN_CHECK_INTERVAL_HOURS", 24.0, float,
         "Verified domains whose DNS check, and sending addresses whose reverse-DNS check, "
         "is older than this are checked again by the scheduled run (hourly on AWS, with "
         "the retention timer locally)."),
    _env("TRACKING_DOMAIN", "", str,
         "Host tenant tracking domains point their CNAME at; empty: the host of PUBLIC_URL."),
    _env("DKIM_RETIRING_DAYS", 7, int,
         "How long a replaced DKIM key (tenant domains, the installation key) stays published "
         "after rotation, so mail and webhooks signed before still verify."),
    _env("API_RATE_LIMIT_PER_SECOND", 0.0, float,
         "Requests a second each server API key may make on average (a token bucket in the "
         "database); 0 turns throttling off. The deployed stages set 50."),
    _env("API_RATE_LIMIT_BURST", 100, int,
         "Requests a server API key may make at once before API_RATE_LIMIT_PER_SECOND applies."),
    _env("RESERVED_DOMAINS_ALLOWED", "", _parse_allowed_reserved,
         "Reserved documentation names (example.com, example.net, example.org, example) that "
         "may be added as sending domains anyway, comma-separated: for test suites and "
         "walk-throughs. Empty: every reserved or special-use domain is refused."),
    _env("DOMAIN_VERIFY_DNS", False, _parse_bool,
         "POST .../domains/{name}/verify first looks the verification TXT record up in DNS "
         "(422 naming the record when it is not there). Off: verify only marks the domain "
         "verified, as the spec reads; the deployed stages turn it on."),
    _env("PUBLIC_URL", "", str,
         "Base URL of the HTTP API for tracking links; empty: http://HOST:PORT, with "
         "localhost for a loopback HOST (what `make run`'s banner prints)."),
    _env("TRACKING_MACHINE_SECONDS", 5.0, float,
         "Opens/clicks this soon after sending are marked likely_machine (prefetch, link scanners)."),
    _env("QUEUE_BACKEND", "local", str, "'local' (an in-memory schedule: `make run`'s processes share it) or 'sqs'."),
    _env("SQS_QUEUE_PREFIX", "email-service-", str, "Prefix of the SQS queue names (…deliveries, …webhooks)."),
    _env("CONTENT_STORE", "file", _choice(("file", "s3")),
         "Where message content (raw sources, signed copies) is kept: 'file' (a directory, "
         "CONTENT_STORE_DIR) or 's3' (CONTENT_BUCKET on S3 or an S3-compatible store); the "
         "rows keep its key, size and sha256 (docs/operating.md, Message content)."),
    _env("CONTENT_STORE_DIR", "var/content", str,
         "The directory of CONTENT_STORE=file (relative: to the working directory)."),
    _env("CONTENT_BUCKET", "", str,
         "The bucket of CONTENT_STORE=s3 (the deployed stacks: the template's content bucket)."),
    _env("CONTENT_S3_ENDPOINT_URL", "", str,
         "An S3-compatible store's endpoint for CONTENT_STORE=s3 (MinIO, Ceph, moto); empty: "
         "AWS's S3 of the region."),
    _env("CONTENT_SWEEP_GRACE_HOURS", 24.0, float,
         "Objects no row names (a crash between the content write and the row's commit) are "
         "deleted by the retention run once they are this old."),
    _env("CONTENT_BACKFILL_BATCH", 200, _at_least(1),
         "Rows whose content the retention run (and `cli content-backfill`) moves from the "
         "old raw columns into the content store per committed batch."),
    _env("WORKER_PROCESSES", os.cpu_count() or 1, _at_least(0),
         "Queue worker processes `make run` starts and restarts when they die (default: one "
         "per core); 0: worker threads inside the main process, as the test suite runs them.",
         shown_default="cores"),
    _env("WORKER_THREADS", 4, _at_least(1),
         "Worker threads of each worker process (of the main process with WORKER_PROCESSES=0), "
         "each taking one batch of wake-ups at a time (deliveries: up to DELIVERY_BATCH_SIZE, "
         "whose SMTP conversations run on the process's DELIVERY_CONCURRENCY pool; other "
         "queues: up to 10)."),
    _env("DELIVERY_CONCURRENCY", 100, _at_least(1),
         "SMTP conversations each worker process (and each Lambda invocation) carries at once: "
         "the threads of its delivery I/O pool, one destination's messages of a batch per "
         "thread. Per-destination connection limits (DELIVERY_PACING_CONNECTIONS, the rules) "
         "bound it further; 1: a batch's destinations one after another."),
    _env("DELIVERY_BATCH_SIZE", 100, _at_least(1),
         "Delivery wake-ups a `make run` worker thread takes at once from the local queue "
         "(the Lambda's batch size is the deliveries mapping's, app.py)."),
    _env("DELIVERY_SESSION_IDLE_SECONDS", 2.0, float,
         "How long an idle SMTP session (with the destination's connection slot it keeps) "
         "stays open for the next message to that destination; 0: closed after each run."),
    _env("HTTP_PROCESSES", 1, _at_least(1),
         "HTTP API processes of `make run`, sharing the port (SO_REUSEPORT); a second "
         "one did not help on 2 cores (bench/RESULTS.md, make run's processes)."),
    _env("SMTP_PROCESSES", 1, _at_least(1),
         "SMTP gateway processes of `make run`, sharing its ports (SO_REUSEPORT)."),
    _env("SWEEP_INTERVAL_SECONDS", 30.0, float, "How often the local stack's sweeper looks for due rows."),
    _env("SWEEP_REWAKE_SECONDS", 900.0, float,
         "A due row the sweeper woke is woken again only after this long without being claimed "
         "(its wake-up was lost): no duplicate queue messages each sweep during a backlog."),
    _env("BULK_CHUNK_SIZE", 500, int,
         "Messages a bulk job acts on per transaction (each chunk commits with the job's cursor)."),
    _env("BULK_TIME_BUDGET_SECONDS", 60.0, float,
         "How long one bulk-worker wake-up runs chunks before it re-enqueues the job (below the Lambda timeout)."),
    _env("CLAIM_TIMEOUT_SECONDS", 960.0, float,
         "How long a worker's claim on a row lasts; longer than the Lambda timeout."),
    _env("MAX_REQUEST_BYTES", 20 * MB, _parse_size, "Largest HTTP request body accepted."),
    _env("LOG_LEVEL", "INFO", str, "Python logging level."),
    _env("LOG_FORMAT", "json", _parse_log_format,
         "json: one JSON object per line (Powertools Logger; the deployed stages); text: "
         "readable key=value lines (`make run` sets it unless you do)."),
    _env("METRICS_BACKEND", "prometheus", _parse_metrics_backend,
         "prometheus: in-process counters at GET /metrics (local); emf: CloudWatch embedded "
         "metric format lines, GET /metrics answers 404 (the deployed stages); off: neither."),
    _env("TRACING", False, _parse_bool,
         "Powertools Tracer subsegments per invocation, sent to X-Ray (the deployed stages, "
         "with active tracing on the functions)."),
    _env("CAPTURE_DIR", "var/captured", str,
         "Where DELIVERY_RELAY=capture also writes each outgoing message as <token>.eml, as a "
         "mailbox would; empty: no files (the deployed stages: Lambda has no shared disk). "
         "Captured mail is kept in the database either way: the console's inbox and "
         "GET /api/v2/server/captured read it from there."),
    _env("WEBAUTHN_RP_ID", "", str,
         "Passkeys' relying-party id: the console's host name or a registrable suffix of it "
         "(passkeys work for that domain and its subdomains; changing it orphans every "
         "registered passkey). Empty: the host of AUTH_FRONTEND_URL, else of PUBLIC_URL, "
         "with localhost for a loopback address (browsers refuse an IP address)."),
    _env("WEBAUTHN_RP_NAME", "Email service", str,
         "The name a browser shows for this installation when a passkey is made or used."),
    _env("WEBAUTHN_ORIGINS", "", str,
         "Origins (scheme://host[:port]) whose pages may register and use passkeys, "
         "comma-separated; empty: the origin of AUTH_FRONTEND_URL, else of PUBLIC_URL "
         "(a loopback address as localhost, as WEBAUTHN_RP_ID)."),
    _env("PASSWORD_HASH_TIME_COST", 3, int, "argon2id iterations; hashes made otherwise are upgraded at login."),
    _env("PASSWORD_HASH_MEMORY_KIB", 65536, int, "argon2id memory in KiB (64 MiB default)."),
    _env("PASSWORD_HASH_PARALLELISM", 4, int, "argon2id lanes."),
)

KEYS_BY_ATTR = {key.attr: key for key in KEYS}


def browser_host(host: str) -> str:
    """The name a browser on this machine uses for ``host``: ``localhost`` for a loopback or
    unspecified address (127.0.0.1, ::1, 0.0.0.0, ::), since browsers accept a host name,
    never an IP address, as the relying-party id of passkeys; else ``host`` (an IPv6
    address in brackets)."""
    import ipaddress

    bare = (host or "").strip().strip("[]")
    if bare.lower() == "localhost":
        return "localhost"
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return bare
    if address.is_loopback or address.is_unspecified:
        return "localhost"
    return f"[{bare}]" if address.version == 6 else bare


def local_url(host: str, port: int) -> str:
    """``http://<browser_host(host)>:<port>``: where the local stack answers a browser, the
    address `make run`'s banner prints and PUBLIC_URL's default."""
    return f"http://{browser_host(host)}:{port}"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    auth_session_timeout_days: int
    auth_max_login_attempts: int
    auth_lockout_minutes: int
    auth_minimum_password_length: int
    auth_allow_registration: bool
    auth_allow_organization_creation: bool
    auth_frontend_url: str
    password_reset_expiry_hours: int
    invitation_expiry_days: int
    smtp_server_max_message_size: int
    auth_oidc_enabled: bool
    auth_oidc_issuer: str
    auth_oidc_client_id: str
    auth_oidc_client_secret: str
    auth_oidc_redirect_uri: str
    database_url: str
    database_owner_url: str
    database_ssl: str
    database_ssl_ca: str
    port: int
    smtp_port: int
    smtp_submission_ports: str
    smtp_tls_port: int
    smtp_tls_cert_path: str
    smtp_tls_key_path: str
    smtp_auth_require_tls: bool
    smtp_auth_max_failures: int
    smtp_auth_failure_window_seconds: float
    smtp_auth_failure_delay_seconds: float
    smtp_max_recipients: int
    smtp_route_cache_seconds: float
    smtp_commit_process: bool
    inbound_max_attempts: int
    inbound_timeout_seconds: float
    host: str
    admin_api_key: str
    signing_key_path: str
    encryption_key: str
    delivery_relay: str
    time_scale: float
    webhooks_allow_private_targets: bool
    webhooks_timeout_seconds: float
    webhooks_concurrency: int
    delivery_max_attempts: int
    delivery_retry_schedule: str
    delivery_timeout_seconds: float
    delivery_pacing_connections: int
    delivery_pacing_per_minute: int
    delivery_pacing_rules: str
    delivery_pacing_backoff_seconds: float
    delivery_pacing_backoff_max_seconds: float
    delivery_mx_port: int
    ip_pool_egress: str
    ip_pool_bind_addresses: str
    mta_sts_ca_bundle: str
    mta_sts_port: int
    mta_sts_check_interval_seconds: float
    outbound_relay_port: int
    outbound_relay_clients: str
    suppression_expiry_days: int
    suppression_repeat_failures: int
    suppression_repeat_days: int
    webhook_log_retention_days: int
    retention_interval_seconds: float
    reputation_guard: str
    reputation_window_hours: int
    reputation_min_volume: int
    reputation_bounce_warning_percent: float
    reputation_bounce_pause_percent: float
    reputation_complaint_warning_percent: float
    reputation_complaint_pause_percent: float
    infrastructure_signal_window_hours: int
    infrastructure_signal_retention_days: int
    smtp_hostname: str
    return_path_domain: str
    fbl_addresses: str
    dmarc_report_address: str
    dmarc_report_max_bytes: int
    dmarc_known_sources: str
    dmarc_report_retention_days: int
    spf_include: str
    dkim_selector: str
    dns_resolvers: str
    dns_cache_max_seconds: float
    dns_timeout_seconds: float
    domain_check_interval_hours: float
    tracking_domain: str
    dkim_retiring_days: int
    api_rate_limit_per_second: float
    api_rate_limit_burst: int
    reserved_domains_allowed: str
    domain_verify_dns: bool
    public_url: str
    tracking_machine_seconds: float
    queue_backend: str
    sqs_queue_prefix: str
    content_store: str
    content_store_dir: str
    content_bucket: str
    content_s3_endpoint_url: str
    content_sweep_grace_hours: float
    content_backfill_batch: int
    worker_processes: int
    worker_threads: int
    delivery_concurrency: int
    delivery_batch_size: int
    delivery_session_idle_seconds: float
    http_processes: int
    smtp_processes: int
    sweep_interval_seconds: float
    sweep_rewake_seconds: float
    bulk_chunk_size: int
    bulk_time_budget_seconds: float
    claim_timeout_seconds: float
    max_request_bytes: int
    log_level: str
    log_format: str
    metrics_backend: str
    tracing: bool
    capture_dir: str
    webauthn_rp_id: str
    webauthn_rp_name: str
    webauthn_origins: str
    password_hash_time_cost: int
    password_hash_memory_kib: int
    password_hash_parallelism: int

    @property
    def fbl_address_set(self) -> frozenset[str]:
        return frozenset(a.strip().lower() for a in self.fbl_addresses.split(",") if a.strip())

    @property
    def effective_return_path_domain(self) -> str:
        return self.return_path_domain or f"rp.{self.smtp_hostname}"

    @property
    def effective_dmarc_report_address(self) -> str:
        return (self.dmarc_report_address.strip().lower()
                or f"dmarc@{self.effective_return_path_domain.lower()}")

    @property
    def effective_spf_include(self) -> str:
        return self.spf_include or f"spf.{self.smtp_hostname}"

    @property
    def effective_tracking_domain(self) -> str:
        if self.tracking_domain:
            return self.tracking_domain.rstrip(".").lower()
        from urllib.parse import urlsplit

        return (urlsplit(self.effective_public_url).hostname or self.host).lower()

    @property
    def effective_public_url(self) -> str:
        return (self.public_url or local_url(self.host, self.port)).rstrip("/")

    @property
    def effective_frontend_url(self) -> str:
        """Where links for people point: AUTH_FRONTEND_URL, else the console served here."""
        return (self.auth_frontend_url or self.effective_public_url).rstrip("/")

    @property
    def effective_webauthn_rp_id(self) -> str:
        if self.webauthn_rp_id:
            return self.webauthn_rp_id.strip().rstrip(".").lower()
        from urllib.parse import urlsplit

        # A loopback address becomes localhost: browsers refuse an IP address as the id.
        return browser_host(urlsplit(self.effective_frontend_url).hostname or self.host).lower()

    @property
    def effective_webauthn_origins(self) -> list[str]:
        listed = [o.strip().rstrip("/") for o in self.webauthn_origins.split(",") if o.strip()]
        if listed:
            return listed
        from urllib.parse import urlsplit

        parts = urlsplit(self.effective_frontend_url)
        host = browser_host(parts.hostname or self.host)
        return [f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")]

    def scaled(self, seconds: float) -> float:
        """A scheduled delay after TIME_SCALE."""
        return seconds * self.time_scale


class ConfigError(Exception):
    """A configuration value that cannot be parsed; names the variable."""


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for key in KEYS:
        raw = env.get(key.env)
        if raw is None:
            values[key.attr] = key.default
            continue
        try:
            values[key.attr] = key.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{key.env}: {exc}") from None
    return Settings(**values)


_cache: tuple[tuple, Settings] | None = None


_env_names: list = []


def _fingerprint() -> tuple:
    # Called on every get_settings() (many per request): read os.environ's backing dict with
    # pre-encoded names instead of decoding ~100 values through os.environ.get each time.
    data = getattr(os.environ, "_data", None)
    if data is None or not hasattr(os.environ, "encodekey"):
        return tuple(os.environ.get(key.env) for key in KEYS)
    if len(_env_names) != len(KEYS):
        _env_names[:] = [os.environ.encodekey(key.env) for key in KEYS]
    return tuple(map(data.get, _env_names))  # (map: half the time of a generator)


_environ_seen: tuple[dict, tuple[tuple, Settings]] | None = None  # (a copy of os.environ's backing dict, the _cache it checked)


def get_settings() -> Settings:
    """Current settings; re-read when any of our environment variables changed."""
    global _cache, _environ_seen
    # Called ~10 times a message: when the environment as a whole is what it was (one dict
    # comparison in C, its values the same objects), our variables are too; only otherwise
    # take the fingerprint of our ~100 variables. The copy is taken before the fingerprint
    # and kept with what it was checked against: a change in between is seen next call.
    data = getattr(os.environ, "_data", None)
    seen = _environ_seen
    if seen is not None and data is not None and seen[1] is _cache and data == seen[0]:
        return seen[1][1]
    snapshot = dict(data) if data is not None else None
    fingerprint = _fingerprint()
    cache = _cache
    if cache is None or cache[0] != fingerprint:
        cache = _cache = (fingerprint, load_settings())
    if snapshot is not None:
        _environ_seen = (snapshot, cache)
    return cache[1]


def markdown_table() -> str:
    """docs/configuration.md's table of every key (``python -m chalicelib.config``)."""
    lines = ["| Environment variable | Spec key | Default | Meaning |", "|---|---|---|---|"]
    for key in KEYS:
        default = key.shown_default or (key.default if key.default != "" else "(empty)")
        lines.append(f"| `{key.env}` | {f'`{key.spec_key}`' if key.spec_key else ''} "
                     f"| `{default}` | {key.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
