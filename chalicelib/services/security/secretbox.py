"""Encrypting secrets at rest: webhook header values, DKIM private keys, TOTP secrets.

Tokens are Fernet tokens (AES-128-CBC + HMAC-SHA256, with a timestamp),
produced by ``cryptography.fernet``. A ``SecretBox`` holds one or more keys:
the first encrypts, all of them decrypt (``MultiFernet``), which is how keys
are rotated:

1. prepend a new key: ``ENCRYPTION_KEY=<new>,<old>``;
2. re-encrypt stored tokens with ``box.rotate(token)`` (optional but advised);
3. drop the old key once nothing uses it.

When the operator sets no ``ENCRYPTION_KEY``, the key is derived with
HKDF-SHA256 from the installation signing key (see ``signing.py``), so a
default install still encrypts secrets at rest; but then the key file *is*
the encryption key. Replacing the signing key without first setting
``ENCRYPTION_KEY`` to the old derived key makes existing tokens unreadable.

Public API
----------
- ``SecretBox(keys)``: ``encrypt``, ``decrypt`` (bytes), ``decrypt_text`` (str),
  ``rotate``
- ``derive_key(material, purpose)`` -> Fernet key (urlsafe base64 bytes)
- ``box_from_settings(encryption_key, signing_key_pem)`` -> ``SecretBox``
- ``generate_key()`` -> a fresh key string for ``ENCRYPTION_KEY``
- ``SecretBoxError`` (any failure), ``InvalidEncryptionKey`` (bad configuration)
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import TYPE_CHECKING

# cryptography is imported inside the functions that use it, not at cold start.
if TYPE_CHECKING:
    from cryptography.fernet import Fernet

__all__ = [
    "DEFAULT_PURPOSE",
    "InvalidEncryptionKey",
    "SecretBox",
    "SecretBoxError",
    "box_from_settings",
    "derive_key",
    "generate_key",
]

#: HKDF ``info`` used by ``box_from_settings`` when deriving from the signing
#: key. Changing it makes every derived-key token unreadable.
DEFAULT_PURPOSE = "secretbox/v1"

_GENERATE_HINT = (
    "generate one with: python -c \"from cryptography.fernet import Fernet; "
    "print(Fernet.generate_key().decode())\""
)


class SecretBoxError(Exception):
    """A secret could not be encrypted or decrypted, or the keys are unusable."""


class InvalidEncryptionKey(SecretBoxError, ValueError):
    """The configured encryption key material is malformed."""


def generate_key() -> str:
    """A new random key suitable for ``ENCRYPTION_KEY`` (urlsafe base64, 32 bytes)."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


def _parse_key(value: str | bytes, position: int) -> Fernet:
    """One Fernet key from urlsafe base64 (padding optional). The key itself is
    never echoed in error messages."""
    label = f"encryption key #{position}"
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("ascii")
        except UnicodeDecodeError:
            raise InvalidEncryptionKey(
                f"{label} is not base64 text; {_GENERATE_HINT}"
            ) from None
    if not isinstance(value, str):
        raise InvalidEncryptionKey(f"{label} must be a string, got {type(value).__name__}")
    text = value.strip()
    if not text:
        raise InvalidEncryptionKey(f"{label} is empty; {_GENERATE_HINT}")
    text += "=" * (-len(text) % 4)
    try:
        # Accept both alphabets but nothing else (validate=True).
        raw = base64.b64decode(text.translate(str.maketrans("-_", "+/")), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidEncryptionKey(
            f"{label} is not valid urlsafe base64; {_GENERATE_HINT}"
        ) from None
    if len(raw) != 32:
        raise InvalidEncryptionKey(
            f"{label} decodes to {len(raw)} bytes, expected 32; {_GENERATE_HINT}"
        )
    from cryptography.fernet import Fernet

    return Fernet(base64.urlsafe_b64encode(raw))


def _split_keys(keys) -> list:
    if isinstance(keys, (str, bytes, bytearray)):
        text = keys.decode("ascii", "replace") if isinstance(keys, (bytes, bytearray)) else keys
        if "," in text:
            return [part for part in text.split(",")]
        return [keys]
    if isinstance(keys, Iterable):
        return list(keys)
    raise InvalidEncryptionKey(
        f"keys must be a key string, a comma-separated string or a list, got {type(keys).__name__}"
    )


class SecretBox:
    """Symmetric authenticated encryption for small secrets.

    ``keys``: one key (``str``/``bytes``, urlsafe base64 of 32 bytes), a
    comma-separated string of keys, or a sequence of keys. The first key
    encrypts; every key is tried for decryption.
    """

    __slots__ = ("_fernet", "_count")

    def __init__(self, keys: str | bytes | Iterable[str | bytes]):
        parts = _split_keys(keys)
        fernets = [_parse_key(k, i + 1) for i, k in enumerate(parts)]
        if not fernets:
            raise InvalidEncryptionKey(f"no encryption key given; {_GENERATE_HINT}")
        from cryptography.fernet import MultiFernet

        self._fernet = MultiFernet(fernets)
        self._count = len(fernets)

    def __repr__(self) -> str:  # never show key material
        return f"<SecretBox keys={self._count}>"

    @property
    def key_count(self) -> int:
        return self._count

    def encrypt(self, data: str | bytes) -> str:
        """Encrypt ``data`` (``str`` is UTF-8 encoded) with the first key; returns
        an ASCII token."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        elif not isinstance(data, bytes):
            raise TypeError(f"can only encrypt str or bytes, not {type(data).__name__}")
        return self._fernet.encrypt(data).decode("ascii")

    def decrypt(self, token: str | bytes) -> bytes:
        """Decrypt a token produced by ``encrypt`` with any configured key.

        Raises ``SecretBoxError`` when no key fits or the token is damaged.
        """
        from cryptography.fernet import InvalidToken

        raw = self._token_bytes(token)
        try:
            return self._fernet.decrypt(raw)
        except InvalidToken:
            raise self._decrypt_error() from None

    def decrypt_text(self, token: str | bytes) -> str:
        """``decrypt`` and decode as UTF-8 (for values encrypted from ``str``)."""
        plain = self.decrypt(token)
        try:
            return plain.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretBoxError("decrypted secret is not UTF-8 text; use decrypt()") from None

    def rotate(self, token: str | bytes) -> str:
        """Re-encrypt ``token`` under the first (current) key."""
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.rotate(self._token_bytes(token)).decode("ascii")
        except InvalidToken:
            raise self._decrypt_error() from None

    @staticmethod
    def _token_bytes(token) -> bytes:
        if isinstance(token, str):
            try:
                token = token.strip().encode("ascii")
            except UnicodeEncodeError:
                raise SecretBoxError("encrypted secret token is not ASCII; it is corrupted") from None
        elif isinstance(token, (bytearray, memoryview)):
            token = bytes(token).strip()
        elif isinstance(token, bytes):
            token = token.strip()
        else:
            raise SecretBoxError(
                f"encrypted secret token must be str or bytes, not {type(token).__name__}"
            )
        if not token:
            raise SecretBoxError("encrypted secret token is empty")
        return token

    def _decrypt_error(self) -> SecretBoxError:
        return SecretBoxError(
            f"could not decrypt secret with any of the {self._count} configured "
            "encryption key(s): it was encrypted under a different ENCRYPTION_KEY "
            "(or a different installation signing key, when ENCRYPTION_KEY is unset), "
            "the old key was removed from the rotation list, or the stored value is corrupted"
        )


def derive_key(material: bytes, purpose: str) -> bytes:
    """Derive a Fernet key (urlsafe base64 of 32 bytes) from secret ``material``.

    HKDF-SHA256, salt = none (RFC 5869 zero salt), info = ``purpose`` as UTF-8,
    32 bytes of output. Different purposes give independent keys.
    """
    if isinstance(material, (bytearray, memoryview)):
        material = bytes(material)
    if not isinstance(material, bytes) or not material:
        raise InvalidEncryptionKey("key derivation material must be non-empty bytes")
    if not isinstance(purpose, str) or not purpose:
        raise InvalidEncryptionKey("key derivation purpose must be a non-empty string")
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=None,
        info=purpose.encode("utf-8"),
    ).derive(material)
    return base64.urlsafe_b64encode(okm)


def _canonical_private_bytes(signing_key_pem: bytes | str) -> bytes:
    """DER PKCS#8 of the signing key, so that re-encoding the PEM (traditional
    vs PKCS#8, line endings) does not change the derived key."""
    if isinstance(signing_key_pem, str):
        signing_key_pem = signing_key_pem.encode("ascii", "replace")
    from cryptography.hazmat.primitives import serialization

    try:
        # Only re-encoded here (never used to sign): the RSA consistency check (~30 ms
        # of CPU per process) is not needed for that.
        key = serialization.load_pem_private_key(bytes(signing_key_pem), password=None,
                                                 unsafe_skip_rsa_key_validation=True)
    except (TypeError, ValueError) as exc:
        raise InvalidEncryptionKey(
            "ENCRYPTION_KEY is not set and the installation signing key could not be "
            f"read to derive one ({exc}); set ENCRYPTION_KEY ({_GENERATE_HINT})"
        ) from None
    return key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def box_from_settings(
    encryption_key: str | None,
    signing_key_pem: bytes | None,
    *,
    purpose: str = DEFAULT_PURPOSE,
) -> SecretBox:
    """The installation's ``SecretBox``.

    - ``encryption_key`` set (non-blank): one urlsafe-base64 32-byte key, or
      several comma-separated keys for rotation (the first encrypts).
    - otherwise: a key derived with ``derive_key`` from the signing key's
      private bytes (canonical DER PKCS#8 of ``signing_key_pem``) and ``purpose``.
    """
    if encryption_key is not None and not isinstance(encryption_key, str):
        if isinstance(encryption_key, (bytes, bytearray)):
            encryption_key = bytes(encryption_key).decode("ascii", "replace")
        else:
            raise InvalidEncryptionKey("ENCRYPTION_KEY must be a string")
    if encryption_key is not None and encryption_key.strip():
        parts = [p.strip() for p in encryption_key.split(",")]
        if any(not p for p in parts):
            raise InvalidEncryptionKey(
                "ENCRYPTION_KEY contains an empty entry; separate keys with single commas "
                "and no trailing comma"
            )
        return SecretBox(parts)
    if not signing_key_pem:
        raise InvalidEncryptionKey(
            "ENCRYPTION_KEY is not set and no installation signing key is available "
            f"to derive one from; set ENCRYPTION_KEY ({_GENERATE_HINT})"
        )
    material = _canonical_private_bytes(signing_key_pem)
    return SecretBox(derive_key(material, purpose))
