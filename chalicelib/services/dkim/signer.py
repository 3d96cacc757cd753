"""Per-tenant DKIM keys and fast DKIM signing (relaxed/relaxed, rsa-sha256).

Pure module: no HTTP, no database.

Why this exists
---------------
dkimpy is the reference implementation we trust for DKIM *message handling*:
RFC 822 parsing, header selection, relaxed canonicalization, body hash, the
``DKIM-Signature`` tag list and its folding.  Its RSA, however, is pure Python
(~10 ms per 2048-bit signature).  ``cryptography`` (OpenSSL) does the same
RSASSA-PKCS1-v1_5 operation in well under a millisecond.

How the RSA step is swapped, without touching dkimpy globally
-------------------------------------------------------------
``dkim.DKIM.sign`` does all the message work and then calls
``self.gen_header(...)``.  ``gen_header`` (inherited from
``dkim.DomainSigner``) canonicalizes the headers, feeds them to the hash via
dkimpy's ``hash_headers`` and finally calls
``dkim.crypto.RSASSA_PKCS1_v1_5_sign(hash, pk)``.  That method is the *only*
place where the private-key operation happens.

:class:`_OpenSSLDKIM` is a private subclass of ``dkim.DKIM`` that overrides
just ``gen_header``.  The override is the dkimpy 1.1.8 method line for line
(same ``fold``, ``RE_BTAG``, ``canonicalize_headers`` and ``hash_headers``
calls from dkimpy itself), except that the final digest is signed with
OpenSSL (``PKCS1v15`` + ``Prehashed(SHA256)``).  Nothing is monkeypatched:
``dkim.sign``, ``dkim.verify``, ``dkim.DKIM`` and ``dkim.crypto`` are left as
they are for every other caller.  PKCS#1 v1.5 signatures are deterministic, so
the result is byte-identical to what pure dkimpy produces for the same message,
key, selector, domain, header list and timestamp; the unit tests prove this.

dkimpy's ``DKIM.sign`` has no timestamp parameter (it reads ``time.time()``),
so when an explicit ``timestamp`` is requested the override rewrites the
``t=`` tag in the tag list it is handed, before anything is folded or hashed.

The pinned dkimpy version is 1.1.8 (requirements.txt).  If dkimpy is upgraded,
the byte-identity tests in ``tests/dkim/test_signer.py`` are the guard
that the override still mirrors ``DomainSigner.gen_header``.

Key handling
------------
Loading a PEM with ``cryptography`` is expensive (~35 ms: OpenSSL validates
the RSA key), so loaded keys are kept in an LRU cache keyed by the PEM bytes.
dkimpy's ``DKIM.sign`` still insists on parsing a PEM itself (pure Python,
~0.1 ms); it is handed a canonical PKCS#1 re-serialization of the cached key
so that any PEM variant ``cryptography`` accepts (PKCS#1, PKCS#8, CRLF line
ends) works, and the override checks that the modulus dkimpy parsed is the
modulus of the OpenSSL key it signs with.
"""

from __future__ import annotations

import base64
import functools
import re
from dataclasses import dataclass

import dkim
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

__all__ = [
    "DEFAULT_SIGNED_HEADERS",
    "OVERSIGNED_HEADERS",
    "DKIMSigningError",
    "KEY_BITS",
    "dns_record_value",
    "dns_txt_strings",
    "generate_key",
    "public_key_b64",
    "sign",
    "sign_message",
    "unsigned",
    "verify",
]

#: Size of newly generated tenant keys.
KEY_BITS = 2048
#: Smallest RSA key we sign with; dkimpy's (and most receivers') verify minimum.
MIN_KEY_BITS = 1024

_CANONICALIZE = (b"relaxed", b"relaxed")
_ALGORITHM = b"rsa-sha256"

#: Header fields signed by default when they are present in the message:
#: RFC 6376 section 5.4.1's recommended set (dkimpy's ``DKIM.SHOULD``) plus
#: List-Unsubscribe-Post (RFC 8058 section 4 requires it to be covered by the
#: DKIM signature for one-click unsubscribe) and Feedback-ID (Gmail's FBL).
DEFAULT_SIGNED_HEADERS: frozenset[bytes] = frozenset(dkim.DKIM.SHOULD) | {
    b"list-unsubscribe-post",
    b"feedback-id",
}

#: Header fields signed one time more than they appear ("oversigned"), as
#: OpenDKIM's ``OversignHeaders`` and rspamd's defaults do: a field present
#: once is listed twice in ``h=``, and a field the message lacks is listed
#: once, which signs its absence (RFC 6376 section 5.4.2: a name in ``h=``
#: with no instance left hashes nothing, so an instance added later changes
#: the hash).  Without it a ``Reply-To:``, ``Cc:`` or ``Sender:`` added in
#: transit, or a second From or Subject prepended to a replayed message, still
#: passed every verifier.  dkimpy's own default oversigns a present From only.
#: The fields a relay may add to mail that lacks them are present in ours:
#: every message we send has From, Date and Message-ID (built, or added by the
#: submission pipeline over SMTP); a relay that adds MIME-Version or a
#: Content-Transfer-Encoding does it while converting the body, which breaks
#: the body hash anyway.
OVERSIGNED_HEADERS: frozenset[bytes] = frozenset(
    {
        b"from",
        b"sender",
        b"reply-to",
        b"to",
        b"cc",
        b"subject",
        b"date",
        b"message-id",
        b"in-reply-to",
        b"references",
        b"mime-version",
        b"content-type",
        b"content-transfer-encoding",
        b"list-unsubscribe",
        b"list-unsubscribe-post",
    }
)

# The absent oversigned fields, in the order h= lists them. From is not among them: a message
# without From is refused (dkimpy: "The From header field MUST be signed"), never signed.
_ABSENT_ORDER: tuple[bytes, ...] = tuple(sorted(OVERSIGNED_HEADERS - {b"from"}))

# Domain names and selectors end up verbatim in the d=/s= tags and in a DNS
# name; allow only DNS-safe characters so nothing can inject tags.
_DNS_NAME_RE = re.compile(rb"\A[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?\Z")


# dkimpy's DKIM.sign parses the private key's PEM in pure Python on every call (~10% of a
# delivery's CPU, py-spy); we always hand it the same canonical bytes for a key (_LoadedKey),
# so that parse, a pure function of the bytes, is memoised.
dkim.parse_pem_private_key = functools.lru_cache(maxsize=256)(dkim.parse_pem_private_key)


class DKIMSigningError(ValueError):
    """The message, key or parameters cannot be DKIM-signed."""


# --------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _LoadedKey:
    key: rsa.RSAPrivateKey
    modulus: int
    #: Canonical unencrypted PKCS#1 PEM with LF line ends, for dkimpy's parser.
    dkimpy_pem: bytes
    public_b64: str


def _public_b64(key: rsa.RSAPrivateKey) -> str:
    der = key.public_key().public_bytes(
        serialization.Encoding.DER,
        serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    return base64.b64encode(der).decode("ascii")


@functools.lru_cache(maxsize=1024)
def _load_key(private_pem: bytes) -> _LoadedKey:
    try:
        # Our own keys (generated here, stored under authenticated encryption): the RSA
        # consistency check (~30 ms of CPU per key and process) proves nothing new.
        key = serialization.load_pem_private_key(private_pem, password=None,
                                                 unsafe_skip_rsa_key_validation=True)
    except (ValueError, TypeError) as exc:
        raise DKIMSigningError(f"unusable DKIM private key: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise DKIMSigningError("DKIM private key is not an RSA key")
    if key.key_size < MIN_KEY_BITS:
        raise DKIMSigningError(
            f"DKIM RSA key is {key.key_size} bits; at least {MIN_KEY_BITS} required"
        )
    dkimpy_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return _LoadedKey(
        key=key,
        modulus=key.private_numbers().public_numbers.n,
        dkimpy_pem=dkimpy_pem,
        public_b64=_public_b64(key),
    )


def _loaded(private_pem: bytes | str) -> _LoadedKey:
    if isinstance(private_pem, str):
        private_pem = private_pem.encode("ascii")
    if not isinstance(private_pem, bytes):
        private_pem = bytes(private_pem)
    return _load_key(private_pem)


def generate_key() -> tuple[bytes, str]:
    """Create a new RSA-2048 DKIM key.

    Returns ``(private_pem, public_b64)``: the unencrypted PKCS#8 PEM private
    key, and the public key as base64 DER SubjectPublicKeyInfo, i.e. the DNS
    ``p=`` value (see :func:`dns_record_value`).
    """
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, _public_b64(key)


def public_key_b64(private_pem: bytes) -> str:
    """The DNS ``p=`` value (base64 DER SubjectPublicKeyInfo) for a private key."""
    return _loaded(private_pem).public_b64


def dns_record_value(public_b64: str) -> str:
    """The TXT record value to publish at ``<selector>._domainkey.<domain>``."""
    p = "".join(public_b64.split())
    if not p:
        raise ValueError("empty DKIM public key")
    try:
        base64.b64decode(p, validate=True)
    except ValueError:
        raise ValueError("DKIM public key is not valid base64") from None
    return f"v=DKIM1; k=rsa; p={p}"


def dns_txt_strings(record_value: str, limit: int = 255) -> list[str]:
    """Split a TXT value into <=255-byte character-strings.

    A 2048-bit record (~410 characters) does not fit in one DNS
    character-string; DNS providers (e.g. Route 53) want it as several quoted
    strings in one TXT record, which resolvers concatenate.
    """
    return [record_value[i : i + limit] for i in range(0, len(record_value), limit)] or [""]


# --------------------------------------------------------------------------
# Signing
# --------------------------------------------------------------------------


class _OpenSSLDKIM(dkim.DKIM):
    """``dkim.DKIM`` whose RSA signing step runs in OpenSSL.

    One instance per message (like ``dkim.sign``).  Only ``gen_header`` is
    overridden; everything else, including ``sign`` and all verification, is
    dkimpy's.
    """

    def __init__(self, message: bytes, *, loaded_key: _LoadedKey, timestamp: int | None):
        super().__init__(message, signature_algorithm=_ALGORITHM, linesep=b"\r\n")
        self.should_sign = set(DEFAULT_SIGNED_HEADERS)
        self.frozen_sign = set(OVERSIGNED_HEADERS)
        self._loaded_key = loaded_key
        self._timestamp = timestamp

    def default_sign_headers(self) -> list[bytes]:
        """dkimpy's default (the present signed fields in message order, then the present
        oversigned ones once more), then every oversigned field the message lacks, once
        (:data:`OVERSIGNED_HEADERS`), in a fixed order."""
        present = {name.lower() for name, _ in self.headers}
        return super().default_sign_headers() + [
            name for name in _ABSENT_ORDER if name not in present]

    # Mirrors dkim.DomainSigner.gen_header (dkimpy 1.1.8) for the non-standardize
    # (DKIM) RSA case; only the private-key operation differs.
    def gen_header(self, fields, include_headers, canon_policy, header_name, pk, standardize=False):
        if standardize or self.signature_algorithm != _ALGORITHM:
            raise DKIMSigningError("only DKIM rsa-sha256 signing is supported")
        if pk["modulus"] != self._loaded_key.modulus:
            raise DKIMSigningError("dkimpy parsed a different key than the one being used")
        if self._timestamp is not None:
            # dkimpy's sign() stamps t= from time.time(); replace it in place
            # (sign() reads this same list afterwards for signature_fields).
            fields[:] = [
                (b"t", str(self._timestamp).encode("ascii")) if k == b"t" else (k, v)
                for k, v in fields
            ]

        header_value = b"; ".join(b"=".join(x) for x in fields)
        header_value = dkim.fold(header_value, namelen=len(header_name), linesep=b"\r\n")
        header_value = dkim.RE_BTAG.sub(b"\\1", header_value)
        header = (header_name, b" " + header_value)
        h = dkim.HashThrough(self.hasher(), self.debug_content)
        sig = dict(fields)

        headers = canon_policy.canonicalize_headers(self.headers)
        self.signed_headers = dkim.hash_headers(h, canon_policy, headers, include_headers, header, sig)
        if self.debug_content:
            self.logger.debug("sign %s headers: %r" % (header_name, h.hashed()))

        # The one change: RSASSA-PKCS1-v1_5 over the SHA-256 digest in OpenSSL
        # instead of dkim.crypto.RSASSA_PKCS1_v1_5_sign(h, pk).
        sig2 = self._loaded_key.key.sign(h.digest(), padding.PKCS1v15(), Prehashed(hashes.SHA256()))

        idx = [i for i in range(len(fields)) if fields[i][0] == b"b"][0]
        fields[idx] = (b"b", base64.b64encode(sig2))
        header_value = b"; ".join(b"=".join(x) for x in fields) + self.linesep
        header_value = dkim.fold(header_value, namelen=len(header_name), linesep=self.linesep)
        return header_value


def _dns_label_bytes(value: bytes | str, what: str) -> bytes:
    if isinstance(value, str):
        try:
            value = value.encode("ascii")
        except UnicodeEncodeError:
            try:
                value = value.encode("idna")
            except UnicodeError:
                raise DKIMSigningError(f"invalid DKIM {what}: {value!r}") from None
    value = bytes(value).rstrip(b".")
    if not _DNS_NAME_RE.match(value) or b".." in value:
        raise DKIMSigningError(f"invalid DKIM {what}: {value!r}")
    return value


def _header_names(headers) -> list[bytes]:
    names = []
    for name in headers:
        if isinstance(name, str):
            name = name.encode("ascii")
        name = bytes(name).strip()
        if not name or b":" in name or any(c <= 32 or c > 126 for c in name):
            raise DKIMSigningError(f"invalid header field name: {name!r}")
        names.append(name)
    return names


def sign(
    message: bytes,
    *,
    domain: str,
    selector: str,
    private_pem: bytes,
    headers: list[bytes] | None = None,
    timestamp: int | None = None,
) -> bytes:
    """DKIM-sign ``message`` (relaxed/relaxed, rsa-sha256).

    Returns the complete ``DKIM-Signature: ...`` header field, folded, with
    CRLF line ends and a trailing CRLF, ready to be prepended to the message.

    ``message`` is the RFC 5322 message as it will be sent (CRLF line ends
    expected; dkimpy also accepts LF).  ``headers`` is the exact list of
    header field names for ``h=`` (order and repetitions are kept, repeat a
    name to oversign it); by default the present fields from
    :data:`DEFAULT_SIGNED_HEADERS` are signed, and those in
    :data:`OVERSIGNED_HEADERS` once more than they appear (absent ones once,
    so none can be added).  From must be signed: a
    message without From, or a ``headers`` list without it, is rejected.
    ``timestamp`` is the ``t=`` value (default: now).

    Raises :class:`DKIMSigningError` on a bad key, name or message.
    """
    if not isinstance(message, (bytes, bytearray, memoryview)):
        raise TypeError("message must be bytes")
    message = bytes(message)
    d = _dns_label_bytes(domain, "domain")
    s = _dns_label_bytes(selector, "selector")
    include = None if headers is None else _header_names(headers)
    if timestamp is not None:
        timestamp = int(timestamp)
        if timestamp < 0:
            raise DKIMSigningError("timestamp must be non-negative")
    loaded = _loaded(private_pem)

    signer = _OpenSSLDKIM(message, loaded_key=loaded, timestamp=timestamp)
    try:
        return signer.sign(
            s,
            d,
            loaded.dkimpy_pem,
            canonicalize=_CANONICALIZE,
            include_headers=include,
        )
    except dkim.DKIMException as exc:
        raise DKIMSigningError(str(exc)) from exc


def sign_message(
    message: bytes,
    *,
    domain: str,
    selector: str,
    private_pem: bytes,
    headers: list[bytes] | None = None,
    timestamp: int | None = None,
) -> bytes:
    """:func:`sign`, returning the ``DKIM-Signature`` header + ``message``."""
    message = bytes(message)
    return (
        sign(
            message,
            domain=domain,
            selector=selector,
            private_pem=private_pem,
            headers=headers,
            timestamp=timestamp,
        )
        + message
    )


# The topmost header field when it is a DKIM-Signature, with its folded lines (sign() writes
# CRLF line ends).
_TOP_SIGNATURE = re.compile(rb"\ADKIM-Signature[ \t]*:[^\r\n]*(?:\r\n[ \t][^\r\n]*)*\r\n", re.I)


def unsigned(signed: bytes) -> bytes:
    """The inverse of :func:`sign_message`: ``signed`` without its topmost
    ``DKIM-Signature`` field (as it was before signing); unchanged when it
    does not start with one.  Delivery re-signs a message whose body it
    converted for a server without 8BITMIME."""
    match = _TOP_SIGNATURE.match(signed)
    return signed[match.end():] if match else signed


# --------------------------------------------------------------------------
# Verification (tests, diagnostics)
# --------------------------------------------------------------------------


def verify(message: bytes, dns_txt: dict[str, str]) -> bool:
    """Verify the topmost DKIM signature with dkimpy's own, unmodified verifier.

    ``dns_txt`` stands in for DNS: ``{"sel._domainkey.example.com":
    "v=DKIM1; k=rsa; p=..."}`` (names compared case-insensitively, trailing dot
    optional).  No network access is made.
    """
    records = {name.rstrip(".").lower(): value for name, value in dns_txt.items()}

    def dnsfunc(name, timeout=5):
        if isinstance(name, bytes):
            name = name.decode("ascii", "replace")
        value = records.get(name.rstrip(".").lower())
        return None if value is None else value.encode("ascii")

    return bool(dkim.verify(bytes(message), dnsfunc=dnsfunc))
