"""DKIM key rotation of a sending domain.

``rotate`` makes a new RSA-2048 key under a new selector, ``pending``: listed beside the
active one so the tenant can publish it first (rotating again replaces a pending key that
was never activated). ``activate`` switches signing to it — with DOMAIN_VERIFY_DNS, only
once its record is found in DNS — and lists the previous key as ``retiring`` for
DKIM_RETIRING_DAYS, so mail signed before (and still being retried: its signed bytes are
kept) verifies; after that it is no longer listed nor checked, and retention deletes it.

The active key stays on the domain row (where the delivery worker reads it with its claim);
``dkim_keys`` holds only the pending and retiring ones.
"""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.models import DkimKey, Domain
from chalicelib.services.dkim import keys, published
from chalicelib.services.dkim.keys import PENDING, RETIRING


def pending_key(domain: Domain) -> DkimKey | None:
    return next((k for k in domain.other_dkim_keys if k.state == PENDING), None)


def rotate(db: Session, domain: Domain) -> DkimKey:
    for old in [k for k in domain.other_dkim_keys if k.state == PENDING]:
        domain.other_dkim_keys.remove(old)  # never signed anything: no need to keep it
    encrypted, public_b64 = keys.generate()
    key = DkimKey(selector=keys.new_selector(domain), state=PENDING,
                  private_key_encrypted=encrypted, public_key=public_b64,
                  created_at=clock.now())
    domain.other_dkim_keys.append(key)
    db.flush()
    return key


def activate(db: Session, domain: Domain) -> Domain:
    key = pending_key(domain)
    if key is None:
        raise errors.ValidationError(
            "dkim: no key is waiting for activation; POST .../dkim/rotate first", field="dkim")
    if get_settings().domain_verify_dns:
        _require_published(domain, key)
    now = clock.now()
    # The active key becomes retiring: still published, no longer signing.
    domain.other_dkim_keys.append(DkimKey(
        selector=domain.dkim_selector, state=RETIRING, private_key_encrypted=None,
        public_key=domain.dkim_public_key, created_at=now,
        retire_at=now + timedelta(days=get_settings().dkim_retiring_days)))
    domain.dkim_selector = key.selector
    domain.dkim_private_key_encrypted = key.private_key_encrypted
    domain.dkim_public_key = key.public_key
    domain.other_dkim_keys.remove(key)
    db.flush()
    return domain


def _require_published(domain: Domain, key: DkimKey) -> None:
    from chalicelib import dns_lookup  # dnspython: not at cold start

    entry = keys.record(domain.name, key.selector, key.public_key)
    try:
        status, _found = published.look_up(entry["name"], key.public_key)
    except dns_lookup.FAILED as exc:
        status, detail = "error", f"the DNS lookup of {entry['name']} TXT failed " \
                                  f"({type(exc).__name__}); it is checked again later"
    else:
        detail = {published.MISSING: f"publish the DKIM record of selector {key.selector}",
                  published.OTHER_KEY: f"the record at {entry['name']} holds another public "
                                       "key"}.get(status, "")
    if status != published.PUBLISHED:
        raise errors.ValidationError(
            f"dkim: {detail}: publish the TXT record {entry['name']} "
            f"{entry['value']!r}, then activate again (status: {status})",
            field="dkim")
