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

import secrets
from datetime import timedelta

from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.config import get_settings
from chalicelib.db.models import DkimKey, Domain
from chalicelib.services.domains import manage
from chalicelib.services.security import keys

PENDING, ACTIVE, RETIRING = "pending", "active", "retiring"


def _new_selector(domain: Domain) -> str:
    taken = {domain.dkim_selector, *(k.selector for k in domain.other_dkim_keys)}
    while True:
        selector = f"{get_settings().dkim_selector}-{secrets.token_hex(3)}"
        if selector not in taken:
            return selector


def _entry(domain: Domain, selector: str, state: str, public_key: str, created_at=None,
           retire_at=None) -> dict:
    return {"selector": selector, "state": state, "public_key": public_key,
            "record": manage.dkim_record(domain, selector, public_key),
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


def record(domain: Domain) -> list[dict]:
    """``dkim_keys`` of the domain record (without the bare public key)."""
    return [{k: v for k, v in entry.items() if k != "public_key"}
            for entry in listed_keys(domain)]


def pending_key(domain: Domain) -> DkimKey | None:
    return next((k for k in domain.other_dkim_keys if k.state == PENDING), None)


def rotate(db: Session, domain: Domain) -> DkimKey:
    for old in [k for k in domain.other_dkim_keys if k.state == PENDING]:
        domain.other_dkim_keys.remove(old)  # never signed anything: no need to keep it
    private_pem, public_b64 = manage._dkim().generate_key()
    key = DkimKey(selector=_new_selector(domain), state=PENDING,
                  private_key_encrypted=keys.secret_box().encrypt(private_pem),
                  public_key=public_b64, created_at=clock.now())
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
    from chalicelib.services.domains import checks  # dnspython: not at cold start

    entry = _entry(domain, key.selector, PENDING, key.public_key)
    result = checks.check_dkim({"name": domain.name}, key.selector, PENDING,
                                       entry["record"]["value"], key.public_key)
    if result["status"] != checks.OK:
        raise errors.ValidationError(
            f"dkim: {result['detail']}: publish the TXT record {entry['record']['name']} "
            f"{entry['record']['value']!r}, then activate again (status: {result['status']})",
            field="dkim")
