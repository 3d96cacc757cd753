"""DNS lookups (dnspython) for delivery (MX, A/AAAA), domain verification and checks (TXT,
CNAME, MX), the reverse DNS of sending addresses (PTR, then A/AAAA), and the host lookups of
webhook and endpoint URLs.

Every lookup goes to DNS_RESOLVERS when it is set ("host[:port],..."; tests point it at a DNS
server on loopback), else to the system's resolver. ``resolver`` may still be set directly
(a test's own dns.resolver.Resolver); it wins over the setting.

Delivery's lookups (``cached=True``: MX, the MX hosts' addresses) go through a resolver with
an in-process cache that keeps each positive answer for its TTL, at most DNS_CACHE_MAX_SECONDS
(dnspython's LRUCache): at thousands of messages a minute to the same domains, asking again
for every message costs a round trip and ~1 CPU-ms each, which a caching resolver on the host
spares Postfix. Negative answers (but an MX host's missing A or AAAA), verification,
domain checks and MTA-STS records (its own memo decides when to look again) are never cached: a user who has just published a record
expects it seen."""
from __future__ import annotations

import socket
import threading
import time

import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver
import dns.reversename

from chalicelib.config import get_settings

resolver: dns.resolver.Resolver | None = None

NXDOMAIN = dns.resolver.NXDOMAIN
NoAnswer = dns.resolver.NoAnswer
#: The lookup could not be answered (a temporary failure, worth trying again).
UNAVAILABLE = (dns.exception.Timeout, dns.resolver.NoNameservers, dns.resolver.LifetimeTimeout)
#: Any other failure of a lookup too (a malformed answer, YXDOMAIN...): what the domain checks
#: report as ``error`` (the helpers below turn NXDOMAIN and empty answers into "none").
FAILED = (dns.exception.DNSException,)

_configured: dict[tuple[str, float], dns.resolver.Resolver] = {}
_configured_lock = threading.Lock()
_ADDRESS_TYPES = (dns.rdatatype.A, dns.rdatatype.AAAA)
_ADDRESS_NAMES = ("A", "AAAA")
#: Delivery's positive answers by (resolvers, cap, name as asked, type): see ``resolve``.
_answers: dict[tuple, dns.resolver.Answer] = {}
_ANSWERS_MAX = 10000


class _CappedCache(dns.resolver.LRUCache):
    """dnspython's LRU cache (thread-safe, honours each answer's TTL), holding no answer
    longer than ``max_seconds``. Of the negative answers it keeps only "this host has no
    A (or no AAAA) record", which every connection to an IPv4-only MX host would ask again;
    not a domain without an MX yet or a name that does not exist: those end in a retry or
    a bounce, rare and not worth a stale "no" once the record is published."""

    def __init__(self, max_seconds: float, max_size: int = 10000):
        super().__init__(max_size)
        self.max_seconds = max_seconds

    def put(self, key, value) -> None:
        if getattr(value, "rrset", None) is None and key[1] not in _ADDRESS_TYPES:
            return
        value.expiration = min(value.expiration, time.time() + self.max_seconds)
        super().put(key, value)


def forget_cached() -> None:
    """Drop every kept answer (a test's new zone; an operator's tool after a DNS change)."""
    _answers.clear()
    with _configured_lock:
        for configured in _configured.values():
            if configured.cache is not None:
                configured.cache.flush()


def _parse(spec: str) -> list[tuple[str, int]]:
    servers = []
    for item in spec.split(","):
        host, _, port = item.rpartition(":")  # config normalized it to host:port / [v6]:port
        servers.append((host.strip("[]"), int(port)))
    return servers


def current_resolver(cached: bool = False) -> dns.resolver.Resolver:
    """The resolver DNS_RESOLVERS names (the system's when empty); ``cached``: the one of
    them that keeps answers (see the module's docstring). A resolver set on the module wins
    and is never cached."""
    if resolver is not None:
        return resolver
    settings = get_settings()
    spec = settings.dns_resolvers
    hold = settings.dns_cache_max_seconds if cached else 0.0
    if not spec and hold <= 0:
        return dns.resolver.get_default_resolver()
    key = (spec, hold)
    configured = _configured.get(key)
    if configured is None:
        with _configured_lock:
            configured = _configured.get(key)
            if configured is None:
                configured = _new_resolver(spec)
                if hold > 0:
                    configured.cache = _CappedCache(hold)
                _configured[key] = configured
    return configured


def _new_resolver(spec: str) -> dns.resolver.Resolver:
    if not spec:
        return dns.resolver.Resolver()  # the system's configuration (/etc/resolv.conf)
    configured = dns.resolver.Resolver(configure=False)
    configured.nameservers = [dns.nameserver.Do53Nameserver(host, port)
                              for host, port in _parse(spec)]
    return configured


def resolve(name: str, rdtype: str, lifetime: float | None = None, cached: bool = False):
    """``name``'s ``rdtype`` records; ``cached``: through delivery's caching resolver, whose
    answers it keeps are also kept here by the name as asked, until the same expiry: a hit
    in dnspython's cache still parses the name and builds a resolution (~50 us, three times
    a message; ~65 us and an exception for the missing AAAA of every session opened)."""
    settings = get_settings()
    if lifetime is None:
        lifetime = settings.dns_timeout_seconds
    if not cached or resolver is not None or settings.dns_cache_max_seconds <= 0:
        return current_resolver(cached).resolve(name, rdtype, lifetime=lifetime)
    answer = _kept(settings, name, rdtype, lifetime)
    if answer.rrset is None:
        raise NoAnswer(response=answer.response)
    return answer


def _kept(settings, name: str, rdtype: str, lifetime: float) -> dns.resolver.Answer:
    """Delivery's cached lookup (``resolve``), an empty answer (``rrset`` None) for "no such
    records"."""
    key = (settings.dns_resolvers, settings.dns_cache_max_seconds, name, rdtype)
    answer = _answers.get(key)
    if answer is None or answer.expiration <= time.time():
        answer = current_resolver(True).resolve(name, rdtype, lifetime=lifetime,
                                                raise_on_no_answer=False)
        if answer.rrset is not None or rdtype in _ADDRESS_NAMES:
            # kept as _CappedCache.put keeps them: positive answers, and an address type's
            # "none" (an IPv4-only MX host's AAAA, asked again at every connection)
            if len(_answers) >= _ANSWERS_MAX:
                _answers.clear()
            _answers[key] = answer  # its expiration capped by _CappedCache.put
    return answer


def txt_strings(name: str, lifetime: float | None = None, cached: bool = False) -> list[str]:
    """The TXT records at ``name``, each one's strings joined (as SPF and DKIM read them);
    [] when the name or its TXT records do not exist. Raises UNAVAILABLE errors."""
    try:
        answer = resolve(name, "TXT", lifetime, cached)
    except (NXDOMAIN, NoAnswer):
        return []
    return [b"".join(record.strings).decode("utf-8", "replace") for record in answer]


def cname_target(name: str, lifetime: float | None = None) -> str | None:
    """The target of the CNAME at ``name`` (lower case, no final dot); None when there is none."""
    try:
        answer = resolve(name, "CNAME", lifetime)
    except (NXDOMAIN, NoAnswer):
        return None
    return answer[0].target.to_text(omit_final_dot=True).lower()


def mx_hosts(name: str, lifetime: float | None = None) -> list[str]:
    """MX exchanges at ``name`` in preference order (lower case, no final dot)."""
    try:
        answer = resolve(name, "MX", lifetime)
    except (NXDOMAIN, NoAnswer):
        return []
    return [r.exchange.to_text(omit_final_dot=True).lower()
            for r in sorted(answer, key=lambda r: r.preference)]


def reverse_name(address: str) -> str:
    """The name an address's PTR record lives at: ``d.c.b.a.in-addr.arpa`` for IPv4, the
    nibbles under ``ip6.arpa`` for IPv6 (no final dot)."""
    return dns.reversename.from_address(address).to_text(omit_final_dot=True)


def ptr_names(address: str, lifetime: float | None = None) -> list[str]:
    """The PTR names of ``address`` (lower case, no final dot); [] when it has none."""
    try:
        answer = resolve(reverse_name(address), "PTR", lifetime)
    except (NXDOMAIN, NoAnswer):
        return []
    return [r.target.to_text(omit_final_dot=True).lower() for r in answer]


def host_addresses(name: str, rdtype: str, lifetime: float | None = None) -> list[str]:
    """The A or AAAA addresses of ``name``; [] when it has none."""
    try:
        answer = resolve(name, rdtype, lifetime)
    except (NXDOMAIN, NoAnswer):
        return []
    return [r.address for r in answer]


def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0, *, cached: bool = False):
    """``socket.getaddrinfo`` through DNS_RESOLVERS when it is set (A and AAAA records);
    the system's getaddrinfo otherwise (it reads /etc/hosts too; any caching is the host's),
    and always for IP literals and ``localhost``. ``cached``: through delivery's caching
    resolver."""
    settings = get_settings()
    if resolver is None and not settings.dns_resolvers:
        return socket.getaddrinfo(host, port, family, type, proto, flags)
    name = host.decode() if isinstance(host, bytes) else str(host)
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in name else socket.AF_INET, name.strip("[]"))
        return socket.getaddrinfo(host, port, family, type, proto, flags)
    except OSError:
        pass
    if name.rstrip(".").lower() == "localhost":
        return socket.getaddrinfo(host, port, family, type, proto, flags)
    results = []
    kept = cached and resolver is None and settings.dns_cache_max_seconds > 0
    for rdtype, fam in (("A", socket.AF_INET), ("AAAA", socket.AF_INET6)):
        if family not in (0, fam):
            continue
        try:
            if kept:  # delivery's: no exception for the "none" of an IPv4-only host
                answer = _kept(settings, name, rdtype, settings.dns_timeout_seconds)
                if answer.rrset is None:
                    continue
            else:
                answer = resolve(name, rdtype, cached=cached)
        except (NXDOMAIN, NoAnswer):
            continue
        except UNAVAILABLE as exc:
            raise socket.gaierror(socket.EAI_AGAIN, f"DNS lookup of {name} failed: {exc}") from None
        for record in answer:
            address = (record.address, port) if fam == socket.AF_INET else \
                (record.address, port, 0, 0)
            results.append((fam, type or socket.SOCK_STREAM, proto, "", address))
    if not results:
        raise socket.gaierror(socket.EAI_NONAME, f"{name} has no A or AAAA record")
    return results
