"""MTA-STS (RFC 8461) for the mail we send: a recipient domain's policy, discovered, fetched,
cached and handed to ``client.send``, which enforces it (``Policy.matches`` and the TLS modes of
``connect.py``).

* **Discovery.** The TXT record at ``_mta-sts.<domain>`` (through DNS_RESOLVERS): exactly one
  record starting ``v=STSv1``, with an ``id`` (1-32 letters and digits); none, several or a
  malformed one mean "no policy" (RFC 8461 3.1).
* **Fetch.** ``https://mta-sts.<domain>/.well-known/mta-sts.txt`` (MTA_STS_PORT in test
  rigs), its certificate validated against MTA_STS_CA_BUNDLE or the system's CAs, connecting
  only to addresses the host resolved to through DNS_RESOLVERS (private ones refused unless
  WEBHOOKS_ALLOW_PRIVATE_TARGETS, as for webhooks); 200 with ``text/plain`` only, redirects
  not followed, at most 64 KiB (3.3). The policy: ``version: STSv1``, ``mode`` (enforce,
  testing, none), ``mx`` patterns (``*.example.net`` matches one leftmost label), ``max_age``
  (seconds, at most a year).
* **Cache.** In the database (``mta_sts_policies``), so every worker shares it: a policy is
  used until ``max_age`` has passed, and fetched again when the TXT id changes. While it is
  fresh, it is used even when the TXT record is gone or the lookup fails, and when a new
  fetch fails (3.3; an attacker who strips DNS answers or the HTTPS fetch cannot turn it
  off). A worker reuses what it learned of a domain for MTA_STS_CHECK_INTERVAL_SECONDS before
  looking again (the TXT lookup and the cache read), so a busy destination costs no lookup
  per message.
* **Failures** of discovery or fetch without a fresh cached policy deliver as if the domain
  had no policy (3.3), and are logged (``delivery.mta_sts``).
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from chalicelib import clock, dns_lookup, observability
from chalicelib.config import get_settings
from chalicelib.db import session_scope
from chalicelib.db.models import MtaStsPolicy

MODES = ("enforce", "testing", "none")
MAX_AGE_LIMIT = 31557600  # RFC 8461 3.2: at most a year
MAX_POLICY_BYTES = 64 * 1024
_ID = re.compile(r"^[A-Za-z0-9]{1,32}$")


class PolicyError(Exception):
    """The policy could not be fetched or read."""


@dataclass(frozen=True)
class Policy:
    domain: str
    policy_id: str
    mode: str
    mx: tuple[str, ...]
    max_age: int

    def matches(self, host: str) -> bool:
        """Whether MX ``host`` is one the policy lists (RFC 8461 4.1)."""
        name = host.rstrip(".").lower()
        for pattern in self.mx:
            if pattern.startswith("*."):
                head, _, rest = name.partition(".")
                if head and rest == pattern[2:]:
                    return True
            elif name == pattern:
                return True
        return False

    def describe(self) -> str:
        return ", ".join(self.mx) or "no MX host"


def txt_id(records: list[str]) -> str | None:
    """The policy id of the ``_mta-sts`` TXT records; None: no (valid) policy announced."""
    found = [r for r in records if r.startswith("v=STSv1")]
    if len(found) != 1:
        return None
    fields = {}
    for part in found[0].split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    policy_id = fields.get("id", "")
    return policy_id if fields.get("v") == "STSv1" and _ID.match(policy_id) else None


def parse(domain: str, policy_id: str, text: str) -> Policy:
    """The policy file's fields (RFC 8461 3.2); raises PolicyError."""
    fields: dict[str, list[str]] = {}
    for line in text.replace("\r\n", "\n").split("\n"):
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    if fields.get("version") != ["STSv1"]:
        raise PolicyError("the policy's version is not STSv1")
    mode = (fields.get("mode") or [""])[0]
    if mode not in MODES:
        raise PolicyError(f"the policy's mode {mode!r} is not enforce, testing or none")
    try:
        max_age = int((fields.get("max_age") or [""])[0])
    except ValueError:
        raise PolicyError("the policy's max_age is not a number of seconds") from None
    if not 0 <= max_age <= MAX_AGE_LIMIT:
        raise PolicyError(f"the policy's max_age {max_age} is out of range")
    mx = tuple(p.rstrip(".").lower() for p in fields.get("mx", []) if p)
    if mode != "none" and not mx:
        raise PolicyError(f"the policy (mode {mode}) lists no mx")
    return Policy(domain, policy_id, mode, mx, max_age)


def policy_url(domain: str) -> str:
    port = get_settings().mta_sts_port
    host = f"mta-sts.{domain}" + (f":{port}" if port != 443 else "")
    return f"https://{host}/.well-known/mta-sts.txt"


def fetch(domain: str, policy_id: str) -> Policy:
    """Fetch and read the policy of ``domain``; raises PolicyError."""
    import requests
    from urllib3.exceptions import HTTPError

    from chalicelib.services.security import url_safety

    settings = get_settings()
    url = policy_url(domain)
    try:
        ips = url_safety.check_url(url, allow_private=settings.webhooks_allow_private_targets,
                                   label="MTA-STS policy URL",
                                   setting="WEBHOOKS_ALLOW_PRIVATE_TARGETS")
        response = url_safety.post_pinned(
            url, ips, method="GET", timeout=min(30.0, settings.delivery_timeout_seconds),
            verify=settings.mta_sts_ca_bundle or True, stream=True)
    except (url_safety.UnsafeURL, requests.RequestException) as exc:
        raise PolicyError(f"fetching {url} failed: {exc}") from None
    with response:
        if response.status_code != 200:
            raise PolicyError(f"{url} answered {response.status_code}")
        media = response.headers.get("Content-Type", "").partition(";")[0].strip().lower()
        if media != "text/plain":
            raise PolicyError(f"{url} is {media or 'untyped'}, not text/plain")
        try:
            body = response.raw.read(MAX_POLICY_BYTES + 1, decode_content=True)
        except (OSError, HTTPError, requests.RequestException) as exc:
            raise PolicyError(f"reading {url} failed: {exc}") from None
    if len(body) > MAX_POLICY_BYTES:
        raise PolicyError(f"{url} is larger than 64 KiB")
    return parse(domain, policy_id, body.decode("utf-8", "replace"))


_memo: dict[str, tuple[float, Policy | None]] = {}
_memo_lock = threading.Lock()


class _Lookup:
    """A lookup of one domain under way in some thread; the others asking meanwhile wait
    for its answer (``done``: it answered; an error leaves each to look up on its own)."""

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.done = False
        self.policy: Policy | None = None


_looking: dict[str, _Lookup] = {}


def forget() -> None:
    """Drop what this process learned (tests; the database cache stays)."""
    with _memo_lock:
        _memo.clear()


def policy_for(domain: str) -> Policy | None:
    """The MTA-STS policy that applies to mail for ``domain`` now, or None. Threads asking
    while another one looks the domain up take its answer instead of looking it up too (a
    batch's runs to one destination start together)."""
    domain = domain.rstrip(".").lower()
    interval = get_settings().mta_sts_check_interval_seconds
    now = clock.timestamp()
    with _memo_lock:
        known = _memo.get(domain)
        if known is not None and now - known[0] < interval:
            return known[1]
        lookup = _looking.get(domain)
        mine = lookup is None
        if lookup is None:
            lookup = _looking[domain] = _Lookup()
    if not mine:
        lookup.ended.wait()
        return lookup.policy if lookup.done else _look_up(domain)
    try:
        lookup.policy = _look_up(domain)
        lookup.done = True
        with _memo_lock:
            if len(_memo) > 10000:
                _memo.clear()
            _memo[domain] = (now, lookup.policy)
    finally:
        with _memo_lock:
            del _looking[domain]
        lookup.ended.set()
    return lookup.policy


def _look_up(domain: str) -> Policy | None:
    try:
        announced = txt_id(dns_lookup.txt_strings(f"_mta-sts.{domain}"))
        lookup_failed = None
    except dns_lookup.FAILED as exc:
        announced, lookup_failed = None, f"TXT lookup of _mta-sts.{domain} failed: {exc}"
    cached = _cached(domain)
    if cached is not None and (announced is None or announced == cached.policy_id):
        return cached  # fresh, and no new id announced (or the TXT record is unavailable)
    if announced is None:
        if lookup_failed:
            _log(domain, lookup_failed)
        return None
    try:
        policy = fetch(domain, announced)
    except PolicyError as exc:
        _log(domain, str(exc) + ("; the cached policy stays in force" if cached else
                                 "; delivering as without a policy"))
        return cached
    _store(policy)
    return policy


def _cached(domain: str) -> Policy | None:
    with session_scope() as db:
        row = db.scalar(select(MtaStsPolicy).where(MtaStsPolicy.domain == domain,
                                                   MtaStsPolicy.expires_at > clock.now()))
        if row is None:
            return None
        return Policy(row.domain, row.policy_id, row.mode,
                      tuple(p for p in row.mx.split("\n") if p), row.max_age)


def _store(policy: Policy) -> None:
    now = clock.now()
    values = dict(policy_id=policy.policy_id, mode=policy.mode, mx="\n".join(policy.mx),
                  max_age=policy.max_age, fetched_at=now,
                  expires_at=now + timedelta(seconds=policy.max_age))
    with session_scope() as db:
        changed = db.execute(update(MtaStsPolicy).where(MtaStsPolicy.domain == policy.domain)
                             .values(**values)).rowcount
        if not changed:
            try:
                with db.begin_nested():
                    db.add(MtaStsPolicy(domain=policy.domain, **values))
            except IntegrityError:  # another worker stored it meanwhile: the same policy
                pass
    observability.log("delivery.mta_sts", "info", domain=policy.domain, mode=policy.mode,
                      policy_id=policy.policy_id, max_age=policy.max_age,
                      details="policy fetched and cached")


def _log(domain: str, problem: str) -> None:
    observability.log("delivery.mta_sts", "warning", domain=domain, details=problem)
