"""Sending-address health: whether each address of each IP pool has the reverse DNS that
receiving mail servers check before they trust it (Gmail and Yahoo refuse or junk mail from an
address without it).

Per address (its IPv4 and its IPv6 address, each when set) three records, in the shape of a
domain's DNS check (``services/domains/checks.py``) with the ``address`` they are about:

* ``ptr``: the address has a PTR record (at ``d.c.b.a.in-addr.arpa``, or under ``ip6.arpa``);
* ``forward``: a PTR name resolves back to the address (A for IPv4, AAAA for IPv6), the
  forward-confirmed reverse DNS receivers require;
* ``helo``: the address's hostname, the name delivery greets with from that address, is one
  of its PTR names.

Status ``ok | missing | mismatch | error`` (error: a lookup failed; checked again later). Every
lookup goes through DNS_RESOLVERS (``dns_lookup``). The result is kept on the address
(``dns_check``, ``checked_at``); a record that was ok and is not now carries ``lost_at`` and is
logged (``ip_address.dns_lost``). Checked on the domain check's schedule (``run_scheduled``:
addresses whose last check is older than DOMAIN_CHECK_INTERVAL_HOURS) and on demand
(GET .../ip_addresses/{id}/check).
"""
from __future__ import annotations

import ipaddress
import time
from datetime import timedelta

from sqlalchemy import or_, select

from chalicelib import clock, dns_lookup, observability
from chalicelib.config import get_settings
from chalicelib.db.models import IPAddress
from chalicelib.services.domains.checks import ERROR, MISMATCH, MISSING, OK, carry_lost


def _record(kind: str, address: str, name: str, rtype: str, expected: str,
            found: list[str] | None, status: str, detail: str) -> dict:
    return {"kind": kind, "address": address, "name": name, "type": rtype,
            "expected": expected, "found": found, "status": status, "detail": detail}


def _failed(kind: str, address: str, name: str, rtype: str, expected: str,
            exc: Exception) -> dict:
    return _record(kind, address, name, rtype, expected, None, ERROR,
                   f"the DNS lookup of {name} {rtype} failed ({type(exc).__name__}); it is "
                   "checked again later")


def _same(a: str, b: str) -> bool:
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


def lookup_address(address: str, hostname: str) -> list[dict]:
    """The three records of one IP address whose HELO name is ``hostname`` (DNS only)."""
    hostname = hostname.lower().rstrip(".")
    reverse = dns_lookup.reverse_name(address)
    rtype = "AAAA" if ipaddress.ip_address(address).version == 6 else "A"
    try:
        names = dns_lookup.ptr_names(address)
    except dns_lookup.FAILED as exc:
        failed = _failed("ptr", address, reverse, "PTR", hostname, exc)
        later = "unknown until the PTR lookup succeeds"
        return [failed,
                _record("forward", address, hostname, rtype, address, None, ERROR, later),
                _record("helo", address, hostname, "HELO", hostname, None, ERROR, later)]
    if not names:
        ask = (f"no PTR record at {reverse}: ask whoever owns {address} (the hosting "
               f"provider; on AWS the Elastic IP's reverse DNS) to point it at {hostname}")
        return [_record("ptr", address, reverse, "PTR", hostname, [], MISSING, ask),
                _record("forward", address, hostname, rtype, address, [], MISSING,
                        "no PTR name to resolve back to the address"),
                _record("helo", address, hostname, "HELO", hostname, [], MISMATCH,
                        f"the address has no PTR name, so {hostname} cannot match it")]
    ptr = _record("ptr", address, reverse, "PTR", hostname, names, OK, "published")
    return [ptr, _forward(address, names, hostname, rtype), _helo(address, names, hostname)]


def _forward(address: str, names: list[str], hostname: str, rtype: str) -> dict:
    """Forward-confirmed reverse DNS: some PTR name (the HELO name first) resolves back."""
    ordered = sorted(names, key=lambda n: n != hostname)
    seen: list[str] = []
    for name in ordered:
        try:
            found = dns_lookup.host_addresses(name, rtype)
        except dns_lookup.FAILED as exc:
            return _failed("forward", address, name, rtype, address, exc)
        if any(_same(found_address, address) for found_address in found):
            return _record("forward", address, name, rtype, address, found, OK,
                           f"{name} resolves back to {address}")
        seen += found
    name = ordered[0]
    if not seen:
        return _record("forward", address, name, rtype, address, [], MISSING,
                       f"{name} has no {rtype} record: publish {name} {rtype} {address}")
    return _record("forward", address, name, rtype, address, seen, MISMATCH,
                   f"{name} resolves to {', '.join(seen)}, not to {address}: receivers do "
                   "not trust a PTR name that does not lead back to the address")


def _helo(address: str, names: list[str], hostname: str) -> dict:
    if hostname in names:
        return _record("helo", address, hostname, "HELO", hostname, names, OK,
                       f"delivery from {address} greets as {hostname}, its PTR name")
    return _record("helo", address, hostname, "HELO", hostname, names, MISMATCH,
                   f"delivery from {address} greets as {hostname} but its PTR name is "
                   f"{', '.join(names)}: set the address's hostname to its PTR name, or "
                   "change the PTR record")


def lookup(plan: list[tuple[str, str]]) -> list[dict]:
    """Every record of an address: ``plan`` is [(ip, hostname)] (its IPv4 and IPv6)."""
    return [record for ip, hostname in plan for record in lookup_address(ip, hostname)]


def plan(address: IPAddress) -> list[tuple[str, str]]:
    return [(ip, address.hostname) for ip in (address.ipv4, address.ipv6) if ip]


def apply(address: IPAddress, records: list[dict], now) -> IPAddress:
    """Keep the result on the address; log each record that was ok and is not now."""
    previous = (address.dns_check or {}).get("records") or []
    for record in carry_lost(previous, records, now):
        observability.log("ip_address.dns_lost", "warning", ip_pool_id=address.ip_pool_id,
                          ip_address_id=address.id, address=record["address"],
                          hostname=address.hostname, check=record["kind"],
                          name=record["name"], status=record["status"],
                          details=record["detail"])
    address.dns_check = {"records": records}
    address.checked_at = now
    return address


def check_address(address: IPAddress) -> IPAddress:
    """Look the address up now and keep the result (GET .../ip_addresses/{id}/check)."""
    return apply(address, lookup(plan(address)), clock.now())


def run_scheduled(max_addresses: int = 500, budget_seconds: float = 300.0) -> dict:
    """Check addresses whose last check is older than DOMAIN_CHECK_INTERVAL_HOURS (never
    checked first), within a time budget (the next run continues). The lookups run outside
    any database transaction."""
    from chalicelib.db import session_scope

    started = time.monotonic()
    cutoff = clock.now() - timedelta(hours=get_settings().domain_check_interval_hours)
    with session_scope() as db:
        todo = [(row.id, plan(row)) for row in db.scalars(
            select(IPAddress).where(or_(IPAddress.checked_at.is_(None),
                                        IPAddress.checked_at < cutoff))
            .order_by(IPAddress.checked_at.is_not(None), IPAddress.checked_at, IPAddress.id)
            .limit(max_addresses))]
    done = problems = 0
    for address_id, address_plan in todo:
        if time.monotonic() - started > budget_seconds:
            break
        records = lookup(address_plan)
        with session_scope() as db:
            address = db.get(IPAddress, address_id)
            if address is None:  # removed meanwhile
                continue
            apply(address, records, clock.now())
        done += 1
        problems += any(r["status"] != OK for r in records)
    return {"checked": done, "with_problems": problems}

