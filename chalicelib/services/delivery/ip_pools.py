"""IP pools and the sending addresses in them (assigned to servers)."""
from __future__ import annotations

import ipaddress

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db import unique
from chalicelib.db.models import IPAddress, IPPool


def create_pool(db: Session, name: str, is_default: bool = False) -> IPPool:
    taken = errors.ValidationError(f"name: an IP pool named {name!r} exists", field="name")
    if db.scalar(select(IPPool).where(IPPool.name == name)):
        raise taken
    if is_default:
        db.execute(update(IPPool).values(is_default=False))
    pool = IPPool(name=name, is_default=is_default)
    with unique.guard(db, taken):
        db.add(pool)
    return pool


def find_pool(db: Session, pool_id: int) -> IPPool:
    pool = db.get(IPPool, pool_id)
    if pool is None:
        raise errors.NotFound(f"no IP pool {pool_id}")
    return pool


def add_address(db: Session, pool: IPPool, *, ipv4: str | None, ipv6: str | None,
                hostname: str, priority: int = 100) -> IPAddress:
    if not ipv4 and not ipv6:
        raise errors.ParameterMissing("ipv4 or ipv6 is required", field="ipv4")
    for value, version, field in ((ipv4, 4, "ipv4"), (ipv6, 6, "ipv6")):
        if value:
            try:
                parsed = ipaddress.ip_address(value)
            except ValueError:
                parsed = None
            if parsed is None or parsed.version != version:
                raise errors.ValidationError(f"{field}: {value!r} is not an IPv{version} address",
                                             field=field)
    address = IPAddress(ip_pool_id=pool.id, ipv4=ipv4, ipv6=ipv6, hostname=hostname,
                        priority=priority)
    db.add(address)
    db.flush()
    return address


def find_address(db: Session, pool: IPPool, address_id: int) -> IPAddress:
    address = db.get(IPAddress, address_id)
    if address is None or address.ip_pool_id != pool.id:
        raise errors.NotFound(f"no IP address {address_id} in pool {pool.id}")
    return address
