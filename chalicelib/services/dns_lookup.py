"""DNS lookups (dnspython) for delivery (MX, A/AAAA) and domain verification (TXT).

One module-level resolver so tests can point every lookup at a DNS server on loopback;
None means the system's."""
from __future__ import annotations

import dns.exception
import dns.resolver

resolver: dns.resolver.Resolver | None = None

NXDOMAIN = dns.resolver.NXDOMAIN
NoAnswer = dns.resolver.NoAnswer
#: The lookup could not be answered (a temporary failure, worth trying again).
UNAVAILABLE = (dns.exception.Timeout, dns.resolver.NoNameservers, dns.resolver.LifetimeTimeout)


def resolve(name: str, rdtype: str, lifetime: float):
    return (resolver or dns.resolver.get_default_resolver()).resolve(name, rdtype,
                                                                     lifetime=lifetime)


def txt_strings(name: str, lifetime: float = 10.0) -> list[str]:
    """The TXT records at ``name``, each one's strings joined (as SPF and DKIM read them);
    [] when the name or its TXT records do not exist. Raises UNAVAILABLE errors."""
    try:
        answer = resolve(name, "TXT", lifetime)
    except (NXDOMAIN, NoAnswer):
        return []
    return [b"".join(record.strings).decode("utf-8", "replace") for record in answer]
