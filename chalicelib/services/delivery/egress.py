"""Which address a delivery leaves from, and with which name it greets: the server's IP pool
(or the default pool when the server has none).

No pool at all (the usual small installation): the system picks the source address and the
greeting is SMTP_HOSTNAME, as before pools existed. With a pool, every connection binds one of
the pool's addresses and greets (EHLO) with that address's ``hostname``, the name its reverse
DNS should give:

* the address is of the family of the address dialled: an MX (or relay) reached over IPv6 is
  dialled from the pool's IPv6 address, over IPv4 from its IPv4 address. A pool with IPv6
  addresses tries the destination's IPv6 addresses first, then IPv4; without a pool IPv4 comes
  first (a sender with no IPv6 set up has no reverse DNS there, which large receivers refuse);
* among the pool's addresses of that family the choice is random, weighted by ``priority``
  (as Postal's pools: an address of priority 200 sends about twice the mail of one of 100);
  priority 0 is a standby, used only when no address of higher priority is usable;
* only addresses this host owns (it can bind them) are used; behind one-to-one NAT (an EC2
  instance's Elastic IPs) IP_POOL_BIND_ADDRESSES names the local address bound for a pool's
  public one, and the attempt records the public one. Where the host owns none of the
  pool's addresses (a Lambda worker behind NAT), the pool's ``relay_host`` carries its mail:
  an MTA on a host that owns them, such as the gateway's outbound relay
  (``smtp/relay.py``), which then binds them. IP_POOL_EGRESS says whether to decide this by
  ownership (auto), never to relay (direct: the relay itself) or always to relay (relay).
* a pool that cannot send from here (no address, none owned and no relay) defers its mail
  with the reason; it is retried on the usual schedule.
"""
from __future__ import annotations

import errno
import ipaddress
import random
import socket
from dataclasses import dataclass, field

from sqlalchemy import select

from chalicelib.config import get_settings
from chalicelib.db.models import IPAddress, IPPool, Server

V4, V6 = socket.AF_INET, socket.AF_INET6


@dataclass(frozen=True)
class Source:
    """One side of a connection: the address bound (None: the system's choice), the name to
    greet with, and the pool's address it stands for (``public``: recorded on the attempt;
    the bound one differs behind one-to-one NAT, IP_POOL_BIND_ADDRESSES)."""

    address: str | None
    hostname: str
    public: str | None = None

    @property
    def shown(self) -> str | None:
        return self.public or self.address


@dataclass(frozen=True)
class Identity:
    """One of a pool's addresses, with only the families this host owns, and the local
    address bound for each (``local``: pool address -> local one, when they differ)."""

    ipv4: str | None
    ipv6: str | None
    hostname: str
    priority: int
    local: tuple = ()

    def address(self, family: int) -> str | None:
        return self.ipv6 if family == V6 else self.ipv4

    def source(self, family: int) -> Source:
        public = self.address(family)
        bound = dict(self.local).get(public, public)
        return Source(bound, self.hostname, public if bound != public else None)


@dataclass
class Egress:
    """How one message leaves: from which addresses, or through which relay."""

    pool: str | None = None                      # the pool's name (None: no pool)
    identities: tuple[Identity, ...] = ()        # the pool's usable addresses here
    relay: tuple[str, int] | None = None         # the pool's relay: the mail goes there
    blocked: str | None = None                   # why this pool's mail cannot leave from here
    missing: dict = field(default_factory=dict)  # family -> addresses this host does not own

    @property
    def key(self) -> str | None:
        """Sessions are reused only within one pool (``client.py``'s cache)."""
        return self.pool

    @property
    def binds(self) -> bool:
        """Connections bind the pool's addresses (not so without a pool, or to its relay:
        this host owns none of them)."""
        return self.pool is not None and self.relay is None

    def families(self) -> tuple[int, ...]:
        """Address families to dial, in order."""
        if not self.binds:
            return (V4, V6)
        return tuple(f for f in (V6, V4) if any(i.address(f) for i in self.identities))

    def sources(self, family: int, rng: random.Random | None = None) -> list[Source]:
        """The sources to try for a destination address of ``family``, in order."""
        if not self.binds:
            return [Source(None, get_settings().smtp_hostname)]
        usable = [i for i in self.identities if i.address(family)]
        return [i.source(family) for i in weighted_order(usable, lambda i: i.priority, rng)]

    def no_source(self, family: int) -> str:
        """Why there is no source for ``family`` (for the delivery's details)."""
        version = 6 if family == V6 else 4
        absent = self.missing.get(family)
        if absent:
            return (f"IP pool {self.pool}'s IPv{version} addresses ({', '.join(absent)}) are "
                    "not addresses of this host")
        return f"IP pool {self.pool} has no IPv{version} address"


DIRECT = Egress()


def weighted_order(items: list, weight, rng: random.Random | None = None) -> list:
    """``items`` in a random order where each comes first with probability weight/total
    (Efraimidis-Spirakis); weight 0 only after every positive one, in the given order."""
    rng = rng or random
    positive = [(rng.random() ** (1.0 / weight(i)), n) for n, i in enumerate(items)
                if weight(i) > 0]
    order = [n for _, n in sorted(positive, reverse=True)]
    order += [n for n, i in enumerate(items) if weight(i) <= 0]
    return [items[n] for n in order]


def owns(address: str) -> bool:
    """Whether this host can bind ``address`` (it is one of its interfaces' addresses)."""
    family = V6 if ":" in address else V4
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
    except OSError as exc:
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EINVAL):
            return False
        raise
    return True


def _normal(address: str) -> str:
    """An address as IP_POOL_BIND_ADDRESSES writes it (IPv6 compressed, lower case)."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def bind_addresses() -> dict[str, str]:
    """IP_POOL_BIND_ADDRESSES: pool (public) address -> the local address to bind."""
    raw = get_settings().ip_pool_bind_addresses
    return dict(pair.split("=", 1) for pair in raw.split(",") if pair)


def parse_relay(value: str) -> tuple[str, int]:
    """``host:port``, ``host`` (port 25) or ``[v6]:port``."""
    value = value.strip()
    if value.startswith("["):  # [::1]:2525
        host, _, rest = value[1:].partition("]")
        return host, int(rest.lstrip(":") or 25)
    if value.count(":") == 1:
        host, port = value.split(":")
        return host, int(port)
    return value, 25


def for_pool(db, pool_id: int | None, mode: str | None = None) -> Egress:
    """The egress of a message whose server sends from pool ``pool_id`` (the server's pool,
    else the default pool: the claim reads it); DIRECT when there is none. ``mode``
    overrides IP_POOL_EGRESS (the outbound relay sends ``direct``)."""
    if pool_id is None:
        return DIRECT
    rows = db.execute(
        select(IPPool.name, IPPool.relay_host, IPAddress.ipv4, IPAddress.ipv6,
               IPAddress.hostname, IPAddress.priority)
        .outerjoin(IPAddress, IPAddress.ip_pool_id == IPPool.id)
        .where(IPPool.id == pool_id).order_by(IPAddress.id)).all()
    if not rows:  # deleted meanwhile (the server's ip_pool_id is then NULL): no pool
        return DIRECT
    name, relay_host = rows[0].name, rows[0].relay_host
    relay = parse_relay(relay_host) if relay_host else None
    mode = mode or get_settings().ip_pool_egress
    if mode == "relay":
        if relay is None:
            return Egress(name, blocked=f"IP pool {name} has no relay_host, and "
                                        "IP_POOL_EGRESS=relay sends every pool's mail through "
                                        "its relay")
        return Egress(name, relay=relay)
    listed = [r for r in rows if r.hostname is not None]
    local = bind_addresses()
    identities, missing = [], {}
    for r in listed:
        mine = {}
        for family, address in ((V4, r.ipv4), (V6, r.ipv6)):
            if address and owns(local.get(_normal(address), address)):
                mine[family] = address
            elif address:
                missing.setdefault(family, []).append(address)
        if mine:
            mapped = tuple((a, local[_normal(a)]) for a in mine.values() if _normal(a) in local)
            identities.append(Identity(mine.get(V4), mine.get(V6), r.hostname, r.priority,
                                       mapped))
    if identities:
        return Egress(name, tuple(identities), missing=missing)
    if relay is not None and mode == "auto":
        return Egress(name, relay=relay)
    if not listed:
        reason = f"IP pool {name} has no addresses"
    else:
        shown = ", ".join(a for a in (*missing.get(V4, ()), *missing.get(V6, ())))
        reason = f"none of IP pool {name}'s addresses ({shown}) is an address of this host"
    if mode == "auto":
        reason += " and the pool has no relay_host"
    return Egress(name, blocked=f"{reason}: its mail waits (see IP pools in docs/deploying.md)")


def server_pool(db, server_id: int) -> int | None:
    """The pool a server sends from: its own, else the default pool (the claim reads the
    same in SQL: ``claim.py``)."""
    own = db.scalar(select(Server.ip_pool_id).where(Server.id == server_id))
    if own is not None:
        return own
    return db.scalar(select(IPPool.id).where(IPPool.is_default.is_(True)).order_by(IPPool.id)
                     .limit(1))
