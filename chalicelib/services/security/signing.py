"""The installation RSA key: webhook body signatures and the DKIM public record.

One RSA private key per installation lives in a PEM file. It is created on
first use (RSA-2048, mode 0600) and then only ever read. Everything here is
pure: no HTTP framework, no database.

Public API
----------
- ``load_or_create_key(path)`` -> ``RSAPrivateKey`` (cached per path)
- ``sign_body(key, body)`` -> base64 RSA PKCS#1 v1.5 / SHA-256 signature
- ``verify_body(public_key, body, signature_b64)`` -> bool
- ``public_key_b64(key)`` -> base64 DER SubjectPublicKeyInfo (DKIM ``p=``)
- ``public_key_pem(key)`` -> PEM SubjectPublicKeyInfo bytes
- ``private_key_pem(key)`` -> unencrypted PKCS#8 PEM bytes
- ``dkim_record(key)`` -> ``"v=DKIM1; k=rsa; p=..."``

Receivers can check a webhook signature with nothing but OpenSSL::

    base64 -d sig.b64 > sig.bin
    openssl dgst -sha256 -verify pub.pem -signature sig.bin body.bin
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import secrets
import stat
import threading
from typing import TYPE_CHECKING

# cryptography is imported inside the functions that use it, not at cold start (importing the
# app does not load it); ``signing.rsa`` & co. still resolve, through __getattr__ below.
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = [
    "KEY_SIZE",
    "PUBLIC_EXPONENT",
    "SigningKeyError",
    "clear_cache",
    "dkim_record",
    "load_or_create_key",
    "private_key_pem",
    "public_key_b64",
    "public_key_der",
    "public_key_pem",
    "sign_body",
    "verify_body",
]

KEY_SIZE = 2048
PUBLIC_EXPONENT = 65537

_cache: dict[str, rsa.RSAPrivateKey] = {}
_cache_lock = threading.Lock()

# errno values meaning "this filesystem cannot make hard links"; we then fall
# back to an exclusive lock file around a plain replace.
_NO_LINK_ERRNOS = frozenset(
    e
    for e in (
        getattr(errno, "EPERM", None),
        getattr(errno, "ENOTSUP", None),
        getattr(errno, "EOPNOTSUPP", None),
        getattr(errno, "ENOSYS", None),
        getattr(errno, "EMLINK", None),
        getattr(errno, "EXDEV", None),
    )
    if e is not None
)


_LAZY_MODULES = {
    "hashes": "cryptography.hazmat.primitives.hashes",
    "padding": "cryptography.hazmat.primitives.asymmetric.padding",
    "rsa": "cryptography.hazmat.primitives.asymmetric.rsa",
    "serialization": "cryptography.hazmat.primitives.serialization",
}


def __getattr__(name: str):
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(_LAZY_MODULES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SigningKeyError(ValueError):
    """The key file exists but cannot be used (corrupt, encrypted, not RSA)."""


# --------------------------------------------------------------------------- #
# Loading / creating
# --------------------------------------------------------------------------- #


def load_or_create_key(path: str) -> rsa.RSAPrivateKey:
    """Return the installation RSA private key stored at ``path``.

    An existing PEM file (PKCS#8 ``BEGIN PRIVATE KEY`` or traditional
    ``BEGIN RSA PRIVATE KEY``, unencrypted) is loaded. A missing file is
    created: a fresh RSA-2048 key is written to a uniquely named temporary file
    (``O_EXCL``, mode 0600, fsynced) in the same directory, then published with
    a no-clobber hard link. If several processes start at once, exactly one
    link wins and every process returns the key that is actually on disk.

    The result is cached per absolute path for the life of the process.
    Raises ``SigningKeyError`` if the file exists but is unusable; it is never
    overwritten.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("path must be a str or os.PathLike")
    abspath = os.path.abspath(os.fspath(path))
    with _cache_lock:
        key = _cache.get(abspath)
        if key is None:
            key = _load_or_create(abspath)
            _cache[abspath] = key
        return key


def clear_cache() -> None:
    """Forget every cached key (tests, or after an operator rotated the file)."""
    with _cache_lock:
        _cache.clear()


def _load_or_create(path: str) -> rsa.RSAPrivateKey:
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass

    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)

    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=PUBLIC_EXPONENT, key_size=KEY_SIZE)
    pem = private_key_pem(key)

    tmp = os.path.join(
        directory,
        ".%s.%d.%s.tmp" % (os.path.basename(path), os.getpid(), secrets.token_hex(8)),
    )
    _write_new_file(tmp, pem)
    try:
        try:
            # link() never replaces an existing file: if another process got
            # there first we get EEXIST and simply use its key.
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in _NO_LINK_ERRNOS:
                raise
            _publish_without_link(tmp, path)
        else:
            _fsync_dir(directory)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass

    # Whoever won, the file on disk is the installation key.
    return _read_key(path)


def _write_new_file(path: str, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        # The umask can only remove bits, but be explicit anyway.
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    os.close(fd)


def _publish_without_link(tmp: str, path: str) -> None:
    """Fallback for filesystems without hard links: lock file + os.replace."""
    import fcntl  # POSIX only; the link() path above covers everything else.

    lock_path = path + ".lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not os.path.exists(path):
            os.replace(tmp, path)
            _fsync_dir(os.path.dirname(path))
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_key(path: str) -> rsa.RSAPrivateKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    with open(path, "rb") as fh:
        data = fh.read()
        mode = os.fstat(fh.fileno()).st_mode
    if not data.strip():
        raise SigningKeyError(
            f"signing key file {path!r} is empty; restore it from backup or delete it "
            "to generate a new key (this changes the webhook signing key and the DKIM record)"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:  # encrypted PEM
        raise SigningKeyError(
            f"signing key file {path!r} is password-protected; store it unencrypted "
            "with mode 0600 (e.g. `openssl pkey -in old.pem -out key.pem`)"
        ) from exc
    except ValueError as exc:
        raise SigningKeyError(
            f"signing key file {path!r} is not a readable PEM private key: {exc}"
        ) from exc
    except Exception as exc:  # cryptography raises UnsupportedAlgorithm for odd keys
        raise SigningKeyError(
            f"signing key file {path!r} could not be loaded: {exc}"
        ) from exc
    if not isinstance(key, rsa.RSAPrivateKey):
        raise SigningKeyError(
            f"signing key file {path!r} holds a {type(key).__name__}, not an RSA key"
        )
    if stat.S_IMODE(mode) & 0o077:
        import warnings

        warnings.warn(
            f"signing key file {path!r} is readable by group/others "
            f"(mode {stat.S_IMODE(mode):04o}); run `chmod 600 {path}`",
            stacklevel=3,
        )
    return key


# --------------------------------------------------------------------------- #
# Signing / verifying
# --------------------------------------------------------------------------- #


def sign_body(key: rsa.RSAPrivateKey, body: bytes) -> str:
    """Base64 (standard alphabet, padded) RSA PKCS#1 v1.5 signature over
    SHA-256 of exactly ``body``."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError("body must be bytes: sign the exact bytes that are sent")
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    signature = key.sign(bytes(body), padding.PKCS1v15(), hashes.SHA256())
    return base64.b64encode(signature).decode("ascii")


def verify_body(public_key, body: bytes, signature_b64: str) -> bool:
    """True if ``signature_b64`` is a valid ``sign_body`` signature of ``body``.

    ``public_key`` may be an ``RSAPublicKey`` or an ``RSAPrivateKey`` (its
    public half is used). Malformed base64 or a wrong signature gives False.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    if isinstance(public_key, rsa.RSAPrivateKey):
        public_key = public_key.public_key()
    if not isinstance(public_key, rsa.RSAPublicKey):
        raise TypeError("public_key must be an RSA public (or private) key")
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError("body must be bytes")
    if isinstance(signature_b64, (bytes, bytearray)):
        try:
            signature_b64 = bytes(signature_b64).decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(signature_b64, str):
        return False
    try:
        signature = base64.b64decode(signature_b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    try:
        public_key.verify(signature, bytes(body), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


# --------------------------------------------------------------------------- #
# Serialisation helpers
# --------------------------------------------------------------------------- #


def _public(key):
    from cryptography.hazmat.primitives.asymmetric import rsa

    if isinstance(key, rsa.RSAPrivateKey):
        return key.public_key()
    if isinstance(key, rsa.RSAPublicKey):
        return key
    raise TypeError("expected an RSA private or public key")


def public_key_der(key) -> bytes:
    """DER SubjectPublicKeyInfo of ``key`` (private or public)."""
    from cryptography.hazmat.primitives import serialization

    return _public(key).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def public_key_b64(key) -> str:
    """Base64 DER SubjectPublicKeyInfo: the DKIM ``p=`` value."""
    return base64.b64encode(public_key_der(key)).decode("ascii")


def public_key_pem(key) -> bytes:
    """PEM SubjectPublicKeyInfo (``BEGIN PUBLIC KEY``), e.g. for receivers."""
    from cryptography.hazmat.primitives import serialization

    return _public(key).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def private_key_pem(key: rsa.RSAPrivateKey) -> bytes:
    """Unencrypted PKCS#8 PEM of the private key."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def dkim_record(key) -> str:
    """The DKIM TXT record value: ``v=DKIM1; k=rsa; p=<base64 SPKI>``.

    For a 2048-bit key the value is longer than 255 characters, so in a zone
    file it must be split into several quoted strings (most DNS consoles do
    that automatically).
    """
    return f"v=DKIM1; k=rsa; p={public_key_b64(key)}"
