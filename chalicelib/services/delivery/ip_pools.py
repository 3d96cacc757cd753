"""IP pools and the sending addresses in them (assigned to servers); how a delivery uses
them is ``egress.py``'s."""
from __future__ import annotations

import ipaddress
import re

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db import unique
from chalicelib.db.models import IPAddress, IPPool
from chalicelib.services.delivery import egress


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def relay_host(value: str | None) -> str | None:
    """A pool's ``relay_host`` normalized (``host:port``; port 25 when none is given), or
    None for none; ValidationError when it is not a host name or IP address and a port."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    problem = f"relay_host: {value!r} is not host:port (a host name or IP address, port 1-65535)"
    try:
        host, port = egress.parse_relay(value)
    except ValueError:
        raise errors.ValidationError(problem, field="relay_host") from None
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
        labels = host.rstrip(".").split(".")
        if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
            raise errors.ValidationError(problem, field="relay_host")
    if not 0 < port < 65536:
        raise errors.ValidationError(problem, field="relay_host")
    return f"[{host}]:{port}" if literal is not None and literal.version == 6 else \
        f"{host}:{port}"


def _name_taken(name: str) -> errors.ValidationError:
    return errors.ValidationError(f"name: an IP pool named {name!r} exists", field="name")


def _unique_name(db: Session, name: str, pool_id: int | None = None) -> None:
    clash = db.scalar(select(IPPool.id).where(IPPool.name == name))
    if clash is not None and clash != pool_id:
        raise _name_taken(name)


def create_pool(db: Session, name: str, is_default: bool = False,
                relay: str | None = None) -> IPPool:
    _unique_name(db, name)
    if is_default:
        db.execute(update(IPPool).values(is_default=False))
    pool = IPPool(name=name, is_default=is_default, relay_host=relay_host(relay))
    with unique.guard(db, _name_taken(name)):
        db.add(pool)
    return pool


def update_pool(db: Session, pool: IPPool, changes: dict) -> IPPool:
    """Change a pool's ``name``, ``default`` or ``relay_host`` (the keys given)."""
    if "name" in changes:
        if changes["name"] is None:
            raise errors.ValidationError("name: an IP pool needs a name", field="name")
        _unique_name(db, changes["name"], pool.id)
        with unique.guard(db, _name_taken(changes["name"])):
            pool.name = changes["name"]
    if "relay_host" in changes:
        pool.relay_host = relay_host(changes["relay_host"])
    if changes.get("default") is True and not pool.is_default:
        db.execute(update(IPPool).where(IPPool.id != pool.id).values(is_default=False))
        pool.is_default = True
    elif changes.get("default") is False:
        pool.is_default = False
    db.flush()
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
