"""Reserved and special-use domain names (IANA's Special-Use Domain Names registry and its
neighbours), refused as sending domains: mail from them can never be delivered, and the
address validator refuses most of them at send time, so accepting one only postpones the
error to every send (a domain under .test was accepted, verified, then each send was a 422).

``RESERVED_DOMAINS_ALLOWED`` lets a test suite or a documentation walk-through use the
documentation names (example.com, .net, .org and the .example TLD): addresses there are valid,
only undeliverable. The others cannot be allowed: no address at them passes validation.
"""
from __future__ import annotations

from chalicelib.config import DOCUMENTATION_DOMAINS, get_settings

_DOCUMENTATION = "reserved for documentation (RFC 2606)"

#: A name and every name under it -> why it is refused.
RESERVED: dict[str, str] = {
    "test": "reserved for testing (RFC 6761)",
    # The only ones RESERVED_DOMAINS_ALLOWED may list (its parser is in config.py).
    **{name: _DOCUMENTATION for name in DOCUMENTATION_DOMAINS},
    "invalid": "reserved as a name that never exists (RFC 6761)",
    "localhost": "reserved for the local host (RFC 6761)",
    "local": "link-local multicast DNS names (RFC 6762)",
    "onion": "Tor onion service names, not reachable through DNS (RFC 7686)",
    "alt": "reserved for names outside the DNS (RFC 9476)",
    "internal": "reserved for private networks (ICANN, 2024)",
    "arpa": "the DNS infrastructure domain (home.arpa: RFC 8375; reverse DNS)",
}

def reserved_reason(ascii_name: str) -> str | None:
    """Why ``ascii_name`` (normalized: lower case, punycode) cannot be a sending domain, or
    None when it can."""
    allowed = set(filter(None, get_settings().reserved_domains_allowed.split(",")))
    labels = ascii_name.split(".")
    for start in range(len(labels)):
        suffix = ".".join(labels[start:])
        why = RESERVED.get(suffix)
        if why is not None and suffix not in allowed:
            where = "is" if start == 0 else f"is under {suffix}, which is"
            return f"{ascii_name} {where} {why}: mail from it cannot be delivered"
    return None
