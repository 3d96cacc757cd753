"""A sending domain's DKIM keys: making one (encrypted at rest), the TXT record each key
publishes, the keys a domain lists (active, pending, retiring), and the active key decrypted
for signing.

The active key stays on the domain row (where the delivery worker reads it with its claim);
``dkim_keys`` rows hold only the pending and retiring ones (``rotation.py``).
"""
from __future__ import annotations

import secrets

from chalicelib import clock
from chalicelib.config import get_settings
from chalicelib.db.models import Domain
from chalicelib.services.security import keys

PENDING, ACTIVE, RETIRING = "pending", "active", "retiring"


def _signer():
    # dkimpy pulls in dnspython (~80 ms); only key creation and the DNS records need it, so
    # a Lambda cold start does not pay for it.
    from chalicelib.services.dkim import signer

    return signer


def generate() -> tuple[bytes, str]:
    """A new key: (the private key encrypted at rest, the public key as the DNS p= value)."""
    private_pem, public_b64 = _signer().generate_key()
    return keys.secret_box().encrypt(private_pem), public_b64


def new_selector(domain: Domain | None = None) -> str:
    """``<DKIM_SELECTOR>-<random>``, none of the domain's selectors."""
    taken = set() if domain is None else \
        {domain.dkim_selector, *(k.selector for k in domain.other_dkim_keys)}
    while True:
        selector = f"{get_settings().dkim_selector}-{secrets.token_hex(3)}"
        if selector not in taken:
            return selector


def record(domain_name: str, selector: str, public_key: str) -> dict:
    """The TXT record that publishes a key."""
    return {"type": "TXT", "name": f"{selector}._domainkey.{domain_name}",
            "value": _signer().dns_record_value(public_key)}


def _entry(domain: Domain, selector: str, state: str, public_key: str, created_at=None,
           retire_at=None) -> dict:
    return {"selector": selector, "state": state, "public_key": public_key,
            "record": record(domain.name, selector, public_key),
            "created_at": created_at, "retire_at": retire_at}


def listed_keys(domain: Domain) -> list[dict]:
    """The keys whose records the domain should publish: active, pending, retiring (until
    their retire_at)."""
    now = clock.now()
    listed = [_entry(domain, domain.dkim_selector, ACTIVE, domain.dkim_public_key)]
    for key in domain.other_dkim_keys:
        if key.state == RETIRING and key.retire_at is not None and key.retire_at <= now:
            continue
        listed.append(_entry(domain, key.selector, key.state, key.public_key, key.created_at,
                             key.retire_at))
    return listed


def listing(domain: Domain) -> list[dict]:
    """``dkim_keys`` of the domain record (without the bare public key)."""
    return [{k: v for k, v in entry.items() if k != "public_key"}
            for entry in listed_keys(domain)]


_decrypted: dict[str, bytes] = {}


def private_key(ciphertext: str) -> bytes:
    """The decrypted private key of ``dkim_private_key_encrypted``, kept per ciphertext (a
    new key is a new ciphertext): decrypting it for every message was ~5% of a delivery's
    CPU."""
    key = _decrypted.get(ciphertext)
    if key is None:
        if len(_decrypted) >= 256:
            _decrypted.clear()
        key = _decrypted[ciphertext] = keys.secret_box().decrypt(ciphertext)
    return key
