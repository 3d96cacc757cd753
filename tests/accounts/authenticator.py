"""A software WebAuthn authenticator for the API-level passkey tests: it answers the options
the service hands out the way a browser and a platform authenticator would (attestation
"none", an ES256 key from `cryptography`, CBOR from `cbor2`, which py_webauthn brings), so
the service's checks run on real answers without a browser. The console's passkey test
uses Chromium's own virtual authenticator instead (tests/browser/test_passkeys.py)."""
from __future__ import annotations

import base64
import hashlib
import json
import os

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

UP, UV, AT = 0x01, 0x04, 0x40  # authenticator data flags: user present, verified, attested


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SoftAuthenticator:
    """One credential. ``verifies_user``: whether it performs user verification (a PIN or
    biometrics); ``origin``: the page the browser would report."""

    def __init__(self, origin: str, *, verifies_user: bool = True):
        self.origin = origin
        self.verifies_user = verifies_user
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(32)
        self.sign_count = 0
        self.user_handle: str | None = None

    @property
    def id(self) -> str:
        return b64u(self.credential_id)

    def _client_data(self, kind: str, challenge: str) -> bytes:
        return json.dumps({"type": kind, "challenge": challenge, "origin": self.origin,
                           "crossOrigin": False}).encode()

    def _flags(self) -> int:
        return UP | (UV if self.verifies_user else 0)

    def create(self, options: dict) -> dict:
        """The answer to navigator.credentials.create(options), as PublicKeyCredential.toJSON()."""
        self.user_handle = options["user"]["id"]
        numbers = self.key.public_key().public_numbers()
        cose_key = cbor2.dumps({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"),
                                -3: numbers.y.to_bytes(32, "big")})
        attested = bytes(16) + len(self.credential_id).to_bytes(2, "big") + \
            self.credential_id + cose_key
        auth_data = hashlib.sha256(options["rp"]["id"].encode()).digest() + \
            bytes([self._flags() | AT]) + self.sign_count.to_bytes(4, "big") + attested
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return {"id": self.id, "rawId": self.id, "type": "public-key",
                "response": {"clientDataJSON": b64u(self._client_data("webauthn.create",
                                                                      options["challenge"])),
                             "attestationObject": b64u(attestation),
                             "transports": ["internal"]},
                "clientExtensionResults": {}, "authenticatorAttachment": "platform"}

    def get(self, options: dict, *, count: bool = True) -> dict:
        """The answer to navigator.credentials.get(options); ``count``: advance the signature
        counter as a real authenticator does (False imitates a cloned one)."""
        if count:
            self.sign_count += 1
        client_data = self._client_data("webauthn.get", options["challenge"])
        auth_data = hashlib.sha256(options["rpId"].encode()).digest() + \
            bytes([self._flags()]) + self.sign_count.to_bytes(4, "big")
        signature = self.key.sign(auth_data + hashlib.sha256(client_data).digest(),
                                  ec.ECDSA(hashes.SHA256()))
        return {"id": self.id, "rawId": self.id, "type": "public-key",
                "response": {"clientDataJSON": b64u(client_data),
                             "authenticatorData": b64u(auth_data),
                             "signature": b64u(signature), "userHandle": self.user_handle},
                "clientExtensionResults": {}, "authenticatorAttachment": "platform"}
