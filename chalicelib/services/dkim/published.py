"""Whether a DKIM key's record is published in DNS: asked by the domain checks (every listed
key) and by key activation (the pending key, before signing switches to it)."""
from __future__ import annotations

from chalicelib import dns_lookup

PUBLISHED, MISSING, OTHER_KEY = "ok", "missing", "mismatch"


def public_key_of(value: str) -> str | None:
    """The ``p=`` tag of a TXT value (white space removed), None when it has none."""
    tags = {}
    for part in value.split(";"):
        key, sep, val = part.partition("=")
        if sep:
            tags[key.strip().lower()] = "".join(val.split())
    return tags.get("p")


def look_up(name: str, public_key: str) -> tuple[str, list[str]]:
    """(PUBLISHED, MISSING or OTHER_KEY; the TXT values found: every one when no DKIM key is
    published there, else the DKIM ones) for the key ``public_key`` at ``name``
    (``<selector>._domainkey.<domain>``). Raises ``dns_lookup.FAILED`` when DNS does not
    answer."""
    txt = dns_lookup.txt_strings(name)
    found = [t for t in txt if public_key_of(t) is not None]
    if not found:
        return MISSING, txt
    if any(public_key_of(t) == public_key for t in found):
        return PUBLISHED, found
    return OTHER_KEY, found
