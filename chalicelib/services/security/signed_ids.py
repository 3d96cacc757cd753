"""Signed ids: ``<id>.<signature>`` tokens that prove an id was handed out by this
installation (a tracking pixel's URL, an unsubscribe link or mailto address), so a guessed or
altered id is refused without a database lookup.

The signature is an HMAC-SHA256 of ``<purpose>:<id>``, truncated to 128 bits (22 base64url
characters), under a key derived from the installation's signing key for that purpose alone:
a token of one purpose never verifies as another's, and rotating the signing key invalidates
them all.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re

from chalicelib.config import get_settings
from chalicelib.services.security import keys

_TOKEN = re.compile(r"^([1-9][0-9]{0,18})\.([A-Za-z0-9_-]{22})$")
_derived: dict[tuple[str, str], bytes] = {}


class SignedIds:
    """Tokens of one purpose; ``label`` names the derived key (``email-service/<label>``)."""

    def __init__(self, purpose: str, label: str):
        self.purpose = purpose
        self.label = label.encode()

    def _key(self) -> bytes:
        cache_key = (get_settings().signing_key_path, self.purpose)
        key = _derived.get(cache_key)
        if key is None:
            from cryptography.hazmat.primitives import serialization  # not at cold start

            der = keys.signing_key().private_bytes(serialization.Encoding.DER,
                                                   serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption())
            key = _derived[cache_key] = hmac.new(der, self.label, hashlib.sha256).digest()
        return key

    def _signature(self, row_id: int) -> str:
        digest = hmac.new(self._key(), f"{self.purpose}:{row_id}".encode(),
                          hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:16]).rstrip(b"=").decode()

    def token(self, row_id: int) -> str:
        return f"{row_id}.{self._signature(row_id)}"

    def verify(self, token: str | None) -> int | None:
        """The id a token was made for; None when it is malformed or not ours."""
        match = _TOKEN.match(token or "")
        if not match:
            return None
        row_id = int(match.group(1))
        if not hmac.compare_digest(match.group(2), self._signature(row_id)):
            return None
        return row_id
