"""Domain health: look up, now, each DNS record a sending domain should have and say per
record whether it is right.

Records: the verification TXT, SPF (one ``v=spf1`` record that includes ours and needs at
most 10 DNS lookups, RFC 7208 4.6.4), DKIM (every listed selector: the active, a pending and
any retiring key; the published ``p=`` must be ours), the return-path CNAME, the SPF record
receivers evaluate for the domain's envelope senders (``return_path_spf``: through the
return-path CNAME, the installation's record at RETURN_PATH_DOMAIN, which must authorise our
sending addresses by including SPF_INCLUDE), the tracking CNAME when one is set, DMARC (present, with its policy) and MX when the domain receives mail
(it has inbound routes). Each answers ``{kind, name, type, expected, found, status, detail}``
with status ``ok | missing | mismatch | error`` (error: the lookup itself failed).

The result is kept on the domain (``dns_check``, ``checked_at``). A record that was ok at the
previous check and is not now carries ``lost_at`` (kept while it stays wrong) and is logged.
The return-path and tracking CNAMEs also switch their use: found -> verified (mail uses them),
lost -> unverified (mail goes back to the installation's own domains, so bounces and clicks
are never sent to a name that no longer leads to us).

``run_scheduled`` is the periodic re-check of verified domains (DOMAIN_CHECK_INTERVAL_HOURS):
hourly on AWS (app.py), on the local stack's retention timer. Its DNS lookups run outside any
database transaction.
"""
from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from chalicelib import clock
from chalicelib.config import get_settings
from chalicelib.db.models import Domain, Route
from chalicelib import dns_lookup
from chalicelib.services.dkim import keys as dkim_keys, published
from chalicelib.services.domains import names, records as domain_records

log = logging.getLogger(__name__)

OK, MISSING, MISMATCH, ERROR = "ok", "missing", "mismatch", "error"
SPF_MAX_LOOKUPS = 10
# Mechanisms and modifiers that cost a DNS lookup (RFC 7208 4.6.4).
_SPF_LOOKUP_TERMS = ("include", "a", "mx", "ptr", "exists", "redirect")


def _iso(value: datetime) -> str:
    return value.replace(microsecond=0).isoformat() + "Z"


def _record(kind: str, name: str, rtype: str, expected: str, found: list[str] | None,
            status: str, detail: str, **extra) -> dict:
    return {"kind": kind, "name": name, "type": rtype, "expected": expected, "found": found,
            "status": status, "detail": detail, **extra}


def _error(kind: str, name: str, rtype: str, expected: str, exc: Exception, **extra) -> dict:
    return _record(kind, name, rtype, expected, None, ERROR,
                   f"the DNS lookup of {name} {rtype} failed ({type(exc).__name__}); "
                   "it is checked again later", **extra)


# --- the plan: plain values read from the database, so lookups need no session ------------

def plan(db: Session, domain: Domain) -> dict:
    settings = get_settings()
    records = domain_records.dns_records(domain)
    return {
        "name": domain.name,
        "verification": records["verification"]["value"],
        "spf_include": settings.effective_spf_include,
        "dkim": [(k["selector"], k["state"], k["record"]["value"], k["public_key"])
                 for k in dkim_keys.listed_keys(domain)],
        "return_path": (names.return_path_name(domain), settings.effective_return_path_domain),
        "return_path_spf": domain_records.return_path_spf(settings)["value"],
        "tracking": (names.tracking_name(domain), settings.effective_tracking_domain)
        if domain.tracking_host else None,
        "receives_mail": db.scalar(select(Route.id).where(Route.domain_id == domain.id)
                                   .limit(1)) is not None,
        "mx": settings.smtp_hostname.lower(),
    }


# --- lookups --------------------------------------------------------------------------------

def _check_verification(p: dict) -> dict:
    name, expected = p["name"], p["verification"]
    try:
        txt = dns_lookup.txt_strings(name)
    except dns_lookup.FAILED as exc:
        return _error("verification", name, "TXT", expected, exc)
    ours = [t for t in txt if t.startswith("email-service-verification=")]
    if expected in txt:
        return _record("verification", name, "TXT", expected, [expected], OK, "published")
    if ours:
        return _record("verification", name, "TXT", expected, ours, MISMATCH,
                       "a verification record with another token is published; publish this one")
    return _record("verification", name, "TXT", expected, [], MISSING,
                   "publish the verification TXT record")


def _spf_lookups(record: str, depth: int, seen: set[str]) -> int:
    """DNS lookups an SPF evaluation of ``record`` needs, following include: and redirect=."""
    count = 0
    for term in record.split()[1:]:
        term = term.lower().lstrip("+-~?")
        if re.split(r"[:/=]", term, maxsplit=1)[0] not in _SPF_LOOKUP_TERMS:
            continue
        count += 1
        target = term.split(":", 1)[1] if term.startswith("include:") else \
            term.split("=", 1)[1] if term.startswith("redirect=") else None
        if target and "%" not in target and target not in seen and depth < SPF_MAX_LOOKUPS:
            seen.add(target)
            try:
                nested = [t for t in dns_lookup.txt_strings(target)
                          if t.lower().startswith("v=spf1")]
            except dns_lookup.FAILED:
                nested = []
            if len(nested) == 1:
                count += _spf_lookups(nested[0], depth + 1, seen)
        if count > SPF_MAX_LOOKUPS:
            break
    return count


def _spf_records(txt: list[str]) -> list[str]:
    return [t for t in txt if t.lower() == "v=spf1" or t.lower().startswith("v=spf1 ")]


def _one_spf(kind: str, name: str, expected: str, missing: str, several: str):
    """``(the one v=spf1 record at name, None)``, or ``(None, the check's answer)`` when the
    lookup fails, there is none (``missing``) or there are several (``several``)."""
    try:
        txt = dns_lookup.txt_strings(name)
    except dns_lookup.FAILED as exc:
        return None, _error(kind, name, "TXT", expected, exc)
    spf = _spf_records(txt)
    if not spf:
        return None, _record(kind, name, "TXT", expected, [], MISSING, missing)
    if len(spf) > 1:
        return None, _record(kind, name, "TXT", expected, spf, MISMATCH,
                             f"{len(spf)} SPF records{several}: receivers treat several as an "
                             "error (permerror); merge them into one")
    return spf[0], None


def _counted(kind: str, name: str, expected: str, record: str, ok: str, what: str) -> dict:
    """The record's DNS lookups counted: more than 10 is a mismatch, else ``ok``."""
    lookups = _spf_lookups(record, 0, {name})
    if lookups > SPF_MAX_LOOKUPS:
        return _record(kind, name, "TXT", expected, [record], MISMATCH,
                       f"{what} needs more than {SPF_MAX_LOOKUPS} DNS lookups "
                       f"({lookups} counted): receivers fail it (permerror)", lookups=lookups)
    return _record(kind, name, "TXT", expected, [record], OK,
                   f"{ok}; {lookups} DNS lookup(s)", lookups=lookups)


def _check_spf(p: dict) -> dict:
    name, include = p["name"], p["spf_include"]
    expected = f"v=spf1 ... include:{include} ... ~all"
    spf, answer = _one_spf("spf", name, expected,
                           f"publish an SPF record that includes {include}", "")
    if answer:
        return answer
    terms = [t.lower().lstrip("+") for t in spf.split()]
    if f"include:{include.lower()}" not in terms:
        return _record("spf", name, "TXT", expected, [spf], MISMATCH,
                       f"the SPF record does not include {include}")
    return _counted("spf", name, expected, spf, f"includes {include}", "the SPF record")


def check_dkim(p: dict, selector: str, state: str, expected: str, public_key: str) -> dict:
    name = f"{selector}._domainkey.{p['name']}"
    extra = {"selector": selector, "state": state}
    try:
        status, found = published.look_up(name, public_key)
    except dns_lookup.FAILED as exc:
        return _error("dkim", name, "TXT", expected, exc, **extra)
    detail = {published.PUBLISHED: "our public key",
              published.MISSING: f"publish the DKIM record of selector {selector}",
              published.OTHER_KEY: f"the record at {name} holds another public key"}[status]
    return _record("dkim", name, "TXT", expected, found, status, detail, **extra)


def _check_cname(kind: str, name: str, target: str) -> dict:
    try:
        found = dns_lookup.cname_target(name)
    except dns_lookup.FAILED as exc:
        return _error(kind, name, "CNAME", target, exc)
    if found is None:
        return _record(kind, name, "CNAME", target, [], MISSING,
                       f"publish {name} CNAME {target}")
    if found != target.lower().rstrip("."):
        return _record(kind, name, "CNAME", target, [found], MISMATCH,
                       f"{name} points at {found}, not {target}")
    return _record(kind, name, "CNAME", target, [found], OK, "points at us")


def _check_return_path_spf(p: dict, cname: dict) -> dict:
    """SPF as receivers evaluate it for the domain's envelope senders. Through a return-path
    CNAME that leads to us, the TXT found at the tenant's host IS the installation's record
    at RETURN_PATH_DOMAIN (a CNAME's name holds no other record, so the tenant cannot
    publish one there); without it, mail uses ``<token>@RETURN_PATH_DOMAIN`` itself, which
    is looked up directly. Either way the record must authorise our sending addresses:
    include SPF_INCLUDE (or redirect to it), where the operator lists them, within 10
    lookups, and not authorise everyone (``+all``)."""
    host, installation = p["return_path"]
    include, expected = p["spf_include"], p["return_path_spf"]
    through = cname["status"] == OK
    name = host if through else installation
    where = (f"{host} (through its CNAME: the installation's record at {installation})"
             if through else f"{installation} (the installation's return-path domain, which "
             f"{p['name']}'s mail uses until {host} is a CNAME to it)")
    fix = (f"the installation's operator publishes {installation} TXT \"{expected}\" "
           "(docs/deploying.md; a tenant cannot)")
    spf, answer = _one_spf(
        "return_path_spf", name, expected,
        f"no SPF record at {where}: receivers find SPF none for this domain's bounce "
        f"addresses; {fix}", f" at {where} (the installation's)")
    if answer:
        return answer
    terms = [t.lower() for t in spf.split()[1:]]
    if "all" in terms or "+all" in terms:
        return _record("return_path_spf", name, "TXT", expected, [spf], MISMATCH,
                       f"the SPF record at {where} authorises every address (+all); {fix}")
    if f"include:{include.lower()}" not in [t.lstrip("+") for t in terms] and \
            f"redirect={include.lower()}" not in terms:
        return _record("return_path_spf", name, "TXT", expected, [spf], MISMATCH,
                       f"the SPF record at {where} does not authorise our sending addresses "
                       f"(it neither includes nor redirects to {include}); {fix}")
    return _counted("return_path_spf", name, expected, spf,
                    f"authorises our sending addresses (through {include}) at {where}",
                    f"the SPF record at {where}")


def _check_dmarc(p: dict) -> dict:
    name = f"_dmarc.{p['name']}"
    expected = "v=DMARC1; p=none|quarantine|reject"
    try:
        txt = dns_lookup.txt_strings(name)
    except dns_lookup.FAILED as exc:
        return _error("dmarc", name, "TXT", expected, exc)
    dmarc = [t for t in txt if t.replace(" ", "").lower().startswith("v=dmarc1")]
    if not dmarc:
        return _record("dmarc", name, "TXT", expected, [], MISSING,
                       "publish a DMARC record (large mailbox providers require one of bulk "
                       "senders); v=DMARC1; p=none is a start", policy=None)
    if len(dmarc) > 1:
        return _record("dmarc", name, "TXT", expected, dmarc, MISMATCH,
                       f"{len(dmarc)} DMARC records: receivers ignore all of them", policy=None)
    tags = {k.strip().lower(): v.strip() for k, _, v in
            (part.partition("=") for part in dmarc[0].split(";")) if k.strip()}
    policy = tags.get("p", "").lower()
    if policy not in ("none", "quarantine", "reject"):
        return _record("dmarc", name, "TXT", expected, dmarc, MISMATCH,
                       "the DMARC record has no valid policy (p=none, quarantine or reject)",
                       policy=policy or None)
    return _record("dmarc", name, "TXT", expected, dmarc, OK, f"policy {policy}",
                   policy=policy)


def _check_mx(p: dict) -> dict:
    name, target = p["name"], p["mx"]
    try:
        hosts = dns_lookup.mx_hosts(name)
    except dns_lookup.FAILED as exc:
        return _error("mx", name, "MX", target, exc)
    if not hosts:
        return _record("mx", name, "MX", target, [], MISSING,
                       f"the domain has inbound routes: publish {name} MX 10 {target}")
    if target not in hosts:
        return _record("mx", name, "MX", target, hosts, MISMATCH,
                       f"the domain has inbound routes but its MX hosts are not {target}")
    return _record("mx", name, "MX", target, hosts, OK, "mail reaches us")


def lookup(p: dict) -> list[dict]:
    """Every record's check, in a stable order (DNS only, no database)."""
    records = [_check_verification(p), _check_spf(p)]
    records += [check_dkim(p, *key) for key in p["dkim"]]
    records.append(_check_cname("return_path", *p["return_path"]))
    records.append(_check_return_path_spf(p, records[-1]))
    if p["tracking"]:
        records.append(_check_cname("tracking", *p["tracking"]))
    records.append(_check_dmarc(p))
    if p["receives_mail"]:
        records.append(_check_mx(p))
    return records


# --- keeping the result ---------------------------------------------------------------------

def _key(record: dict) -> str:
    return f"{record['kind']}:{record['name']}:{record.get('address', '')}"


def carry_lost(previous: list[dict], records: list[dict], now: datetime) -> list[dict]:
    """Mark ``records`` that were ok in ``previous`` (the last check's) and are not now with
    ``lost_at`` (now, or kept from the check that first found them wrong). Returns the ones
    lost at this check (to log)."""
    before_by_key = {_key(r): r for r in previous}
    lost = []
    for record in records:
        before = before_by_key.get(_key(record))
        if record["status"] == OK or before is None:
            continue
        if before.get("status") == OK:
            record["lost_at"] = _iso(now)
            lost.append(record)
        elif before.get("lost_at"):
            record["lost_at"] = before["lost_at"]
    return lost


def apply(domain: Domain, records: list[dict], now: datetime) -> dict:
    """Keep the result on the domain: carry ``lost_at`` forward, switch the return path and
    tracking domain on or off. Returns the check's answer."""
    for record in carry_lost((domain.dns_check or {}).get("records") or [], records, now):
        log.warning("domain %s (id %s): the %s record %s %s is %s now (%s)", domain.name,
                    domain.id, record["kind"], record["name"], record["type"],
                    record["status"], record["detail"])
    for record in records:
        if record["kind"] == "return_path":
            _switch(domain, "return_path_verified_at", record["status"], now)
        elif record["kind"] == "tracking":
            _switch(domain, "tracking_verified_at", record["status"], now)
    domain.dns_check = {"records": records}
    domain.checked_at = now
    return answer(domain)


def _switch(domain: Domain, attr: str, status: str, now: datetime) -> None:
    if status == OK and getattr(domain, attr) is None:
        setattr(domain, attr, now)
    elif status in (MISSING, MISMATCH):  # a failed lookup (error) changes nothing
        setattr(domain, attr, None)


def answer(domain: Domain) -> dict:
    records = (domain.dns_check or {}).get("records") or []
    return {"domain": domain.name, "checked_at": domain.checked_at,
            "ok": bool(records) and all(r["status"] == OK for r in records),
            "problems": sum(r["status"] != OK for r in records), "records": records}


def check_domain(db: Session, domain: Domain) -> dict:
    """Look every record up now and keep the result (GET .../domains/{name}/check)."""
    records = lookup(plan(db, domain))
    return apply(domain, records, clock.now())


def verify_cnames(domain: Domain, now: datetime) -> None:
    """``verify`` with DOMAIN_VERIFY_DNS: mark the return-path and tracking CNAMEs verified
    when they are found (their absence does not fail verification)."""
    settings = get_settings()
    pairs = [("return_path_verified_at", names.return_path_name(domain),
              settings.effective_return_path_domain)]
    if domain.tracking_host:
        pairs.append(("tracking_verified_at", names.tracking_name(domain),
                      settings.effective_tracking_domain))
    for attr, name, target in pairs:
        if _check_cname("cname", name, target)["status"] == OK:
            setattr(domain, attr, getattr(domain, attr) or now)


def run_scheduled(max_domains: int = 200, budget_seconds: float = 600.0) -> dict:
    """Re-check verified domains whose last check is older than DOMAIN_CHECK_INTERVAL_HOURS,
    oldest first, within a time budget (the next run continues). Each domain: plan in one
    short session, lookups outside any, the result in another. The due domains are every
    tenant's (db/tenancy.py, "domain-checks"); each is then checked acting for its server."""
    from chalicelib.db import session_scope, tenancy

    started = time.monotonic()
    cutoff = clock.now() - timedelta(hours=get_settings().domain_check_interval_hours)
    with session_scope() as db, tenancy.across_tenants(db, "domain-checks"):
        due = list(db.execute(select(Domain.id, Domain.server_id).where(
            Domain.verified_at.is_not(None),
            or_(Domain.checked_at.is_(None), Domain.checked_at < cutoff))
            .order_by(Domain.checked_at.is_not(None), Domain.checked_at, Domain.id)
            .limit(max_domains)))
    done = problems = 0
    for domain_id, server_id in due:
        if time.monotonic() - started > budget_seconds:
            break
        with session_scope() as db:
            tenancy.act(db, tenancy.for_server(server_id))
            domain = db.get(Domain, domain_id)
            if domain is None:
                continue
            p = plan(db, domain)
        records = lookup(p)
        with session_scope() as db:
            tenancy.act(db, tenancy.for_server(server_id))
            domain = db.get(Domain, domain_id)
            if domain is None:
                continue
            result = apply(domain, records, clock.now())
        done += 1
        problems += result["problems"] > 0
    return {"checked": done, "with_problems": problems}
