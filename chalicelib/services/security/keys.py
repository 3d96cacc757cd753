"""The installation's keys: the RSA signing key (SIGNING_KEY_PATH) and the SecretBox that
encrypts secrets at rest (ENCRYPTION_KEY, or a key derived from the signing key)."""
from __future__ import annotations

from chalicelib.config import get_settings
from chalicelib.services.security import secretbox, signing


def signing_key():
    return signing.load_or_create_key(get_settings().signing_key_path)


_boxes: dict[tuple, secretbox.SecretBox] = {}


def secret_box() -> secretbox.SecretBox:
    settings = get_settings()
    cache_key = (settings.encryption_key, settings.signing_key_path)
    box = _boxes.get(cache_key)
    if box is None:
        # Not imported at module level: cryptography stays out of the cold start.
        from cryptography.hazmat.primitives import serialization

        pem = signing_key().private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())
        box = _boxes[cache_key] = secretbox.box_from_settings(settings.encryption_key or None, pem)
    return box


ENCRYPTION_KEY_WARNING = (
    "ENCRYPTION_KEY is not set: secrets at rest (DKIM keys, webhook and endpoint secrets) are "
    "encrypted with a key derived from the signing key, so whoever holds the signing key can "
    "read them, and rotating it makes them unreadable. Set ENCRYPTION_KEY (a Fernet key: "
    "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
    " before storing real secrets.")


def startup_warnings(settings) -> list[str]:
    """What an operator should hear about at every start (printed and logged)."""
    return [] if settings.encryption_key.strip() else [ENCRYPTION_KEY_WARNING]
