import base64

import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from chalicelib.services.security.secretbox import (
    DEFAULT_PURPOSE,
    InvalidEncryptionKey,
    SecretBox,
    SecretBoxError,
    box_from_settings,
    derive_key,
    generate_key,
)


@pytest.fixture(scope="module")
def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key, fmt=serialization.PrivateFormat.PKCS8):
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())


# --------------------------------------------------------------------------- #
# SecretBox
# --------------------------------------------------------------------------- #


def test_round_trip_str_and_bytes():
    box = SecretBox(generate_key())
    token = box.encrypt("Bearer s3cr3t ✓")
    assert isinstance(token, str)
    assert "s3cr3t" not in token
    assert box.decrypt(token) == "Bearer s3cr3t ✓".encode()
    assert box.decrypt_text(token) == "Bearer s3cr3t ✓"

    raw = bytes(range(256))
    assert box.decrypt(box.encrypt(raw)) == raw
    assert box.decrypt(box.encrypt(b"")) == b""
    assert box.decrypt(token.encode("ascii")) == "Bearer s3cr3t ✓".encode()


def test_encryption_is_randomised():
    box = SecretBox(generate_key())
    assert box.encrypt("same") != box.encrypt("same")


def test_tokens_are_standard_fernet():
    key = generate_key()
    token = SecretBox(key).encrypt("x")
    assert Fernet(key.encode()).decrypt(token.encode()) == b"x"
    assert SecretBox(key).decrypt(Fernet(key.encode()).encrypt(b"y")) == b"y"


def test_wrong_key_fails_with_clear_error():
    token = SecretBox(generate_key()).encrypt("secret")
    with pytest.raises(SecretBoxError, match="could not decrypt secret") as info:
        SecretBox(generate_key()).decrypt(token)
    assert "ENCRYPTION_KEY" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_tampered_and_garbage_tokens_fail_with_secretboxerror():
    box = SecretBox(generate_key())
    token = box.encrypt("secret")
    flipped = token[:-5] + ("A" if token[-5] != "A" else "B") + token[-4:]
    for bad in (flipped, "not-a-token", "é", "   "):
        with pytest.raises(SecretBoxError):
            box.decrypt(bad)
    with pytest.raises(SecretBoxError):
        box.decrypt(None)


def test_decrypt_text_non_utf8():
    box = SecretBox(generate_key())
    with pytest.raises(SecretBoxError, match="UTF-8"):
        box.decrypt_text(box.encrypt(b"\xff\xfe"))


def test_encrypt_rejects_other_types():
    with pytest.raises(TypeError):
        SecretBox(generate_key()).encrypt(12)


def test_rotation_old_tokens_still_decrypt_and_new_key_encrypts():
    old, new = generate_key(), generate_key()
    old_token = SecretBox(old).encrypt("webhook header value")

    rotated_box = SecretBox([new, old])
    assert rotated_box.key_count == 2
    assert rotated_box.decrypt_text(old_token) == "webhook header value"

    new_token = rotated_box.encrypt("fresh")
    assert SecretBox(new).decrypt_text(new_token) == "fresh"
    with pytest.raises(SecretBoxError):
        SecretBox(old).decrypt(new_token)

    # rotate() re-encrypts under the first key so the old one can be dropped
    migrated = rotated_box.rotate(old_token)
    assert SecretBox(new).decrypt_text(migrated) == "webhook header value"
    with pytest.raises(SecretBoxError):
        rotated_box.rotate(SecretBox(generate_key()).encrypt("other"))


def test_comma_separated_string_constructor():
    old, new = generate_key(), generate_key()
    token = SecretBox(old).encrypt("x")
    assert SecretBox(f"{new}, {old}").decrypt_text(token) == "x"


def test_invalid_keys_are_rejected_without_echoing_them():
    secretish = "c2hvcnQ="  # base64 of "short"
    with pytest.raises(InvalidEncryptionKey, match="expected 32") as info:
        SecretBox(secretish)
    assert secretish not in str(info.value)
    assert isinstance(info.value, SecretBoxError) and isinstance(info.value, ValueError)

    with pytest.raises(InvalidEncryptionKey, match="base64"):
        SecretBox("!" * 44)
    with pytest.raises(InvalidEncryptionKey, match="empty"):
        SecretBox("")
    with pytest.raises(InvalidEncryptionKey, match="no encryption key"):
        SecretBox([])
    with pytest.raises(InvalidEncryptionKey, match="#2"):
        SecretBox([generate_key(), "nope"])


def test_key_without_padding_and_bytes_key_accepted():
    key = generate_key()
    token = SecretBox(key).encrypt("x")
    assert SecretBox(key.rstrip("=")).decrypt_text(token) == "x"
    assert SecretBox(key.encode()).decrypt_text(token) == "x"


def test_repr_hides_keys():
    key = generate_key()
    assert key not in repr(SecretBox(key))


# --------------------------------------------------------------------------- #
# derive_key
# --------------------------------------------------------------------------- #


def test_derive_key_is_deterministic_and_purpose_separated():
    k1 = derive_key(b"material", "webhook-headers")
    assert k1 == derive_key(b"material", "webhook-headers")
    assert k1 != derive_key(b"material", "totp")
    assert k1 != derive_key(b"other material", "webhook-headers")
    assert len(base64.urlsafe_b64decode(k1)) == 32
    Fernet(k1)  # usable as a Fernet key


def test_derive_key_is_hkdf_sha256_zero_salt_info_purpose():
    """Recompute RFC 5869 HKDF with the standard library only, so another
    implementation can re-derive the same key."""
    import hashlib
    import hmac

    ikm, info = b"installation key bytes", "secretbox/v1"
    prk = hmac.new(b"\x00" * 32, ikm, hashlib.sha256).digest()  # extract, no salt
    okm = hmac.new(prk, info.encode() + b"\x01", hashlib.sha256).digest()  # expand, 32 bytes
    assert derive_key(ikm, info) == base64.urlsafe_b64encode(okm)


def test_derive_key_rejects_empty_input():
    with pytest.raises(InvalidEncryptionKey):
        derive_key(b"", "x")
    with pytest.raises(InvalidEncryptionKey):
        derive_key(b"m", "")


# --------------------------------------------------------------------------- #
# box_from_settings
# --------------------------------------------------------------------------- #


def test_box_from_settings_explicit_key_wins(rsa_key):
    key = generate_key()
    box = box_from_settings(key, _pem(rsa_key))
    assert SecretBox(key).decrypt_text(box.encrypt("x")) == "x"


def test_box_from_settings_rotation_list(rsa_key):
    old, new = generate_key(), generate_key()
    token = SecretBox(old).encrypt("x")
    box = box_from_settings(f" {new} , {old} ", _pem(rsa_key))
    assert box.decrypt_text(token) == "x"
    assert SecretBox(new).decrypt_text(box.encrypt("y")) == "y"


def test_box_from_settings_rejects_empty_entries():
    with pytest.raises(InvalidEncryptionKey, match="empty entry"):
        box_from_settings(generate_key() + ",", None)


def test_box_from_settings_derived_when_unset(rsa_key):
    pem = _pem(rsa_key)
    box = box_from_settings(None, pem)
    token = box.encrypt("totp-secret")
    # same signing key -> same derived key, across instances / restarts
    assert box_from_settings(None, pem).decrypt_text(token) == "totp-secret"
    # blank ENCRYPTION_KEY counts as unset
    assert box_from_settings("  ", pem).decrypt_text(token) == "totp-secret"
    # PEM re-encoding (traditional vs PKCS#8) does not change the derived key
    trad = _pem(rsa_key, serialization.PrivateFormat.TraditionalOpenSSL)
    assert box_from_settings(None, trad).decrypt_text(token) == "totp-secret"
    # matches derive_key over the canonical DER PKCS#8 private bytes
    der = rsa_key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    assert SecretBox(derive_key(der, DEFAULT_PURPOSE)).decrypt_text(token) == "totp-secret"


def test_box_from_settings_derived_key_differs_per_installation(rsa_key):
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = box_from_settings(None, _pem(rsa_key)).encrypt("x")
    with pytest.raises(SecretBoxError):
        box_from_settings(None, _pem(other)).decrypt(token)


def test_box_from_settings_derived_purpose(rsa_key):
    pem = _pem(rsa_key)
    token = box_from_settings(None, pem, purpose="dkim-keys").encrypt("x")
    with pytest.raises(SecretBoxError):
        box_from_settings(None, pem).decrypt(token)


def test_box_from_settings_needs_some_key():
    with pytest.raises(InvalidEncryptionKey, match="ENCRYPTION_KEY"):
        box_from_settings(None, None)
    with pytest.raises(InvalidEncryptionKey, match="ENCRYPTION_KEY"):
        box_from_settings("", b"")
    with pytest.raises(InvalidEncryptionKey, match="signing key could not be read"):
        box_from_settings(None, b"not a pem")
