"""Tests for chalicelib.services.dkim.signer.

The reference for every signature is dkimpy itself: pure-Python ``dkim.sign``
(its own RSA) must produce exactly the same bytes as our OpenSSL-backed
``sign``, and dkimpy's unmodified ``dkim.verify`` (pure-Python RSA verify,
independent of OpenSSL) must accept them.
"""

import base64
import time
import types

import dkim
import dkim.crypto
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from chalicelib.services.dkim import signer as ds

TS = 1_700_000_000
DOMAIN = "example.com"
SELECTOR = "s2024"
DNS_NAME = f"{SELECTOR}._domainkey.{DOMAIN}"


# --------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keypair():
    return ds.generate_key()


@pytest.fixture(scope="module")
def other_keypair():
    return ds.generate_key()


@pytest.fixture(scope="module")
def dns(keypair):
    return {DNS_NAME: ds.dns_record_value(keypair[1])}


@pytest.fixture
def frozen_dkimpy_clock(monkeypatch):
    """Pin the clock dkimpy reads for t= (dkim.sign has no timestamp argument).

    Only the ``time`` name inside the ``dkim`` module is replaced, for the
    duration of one test.
    """
    monkeypatch.setattr(dkim, "time", types.SimpleNamespace(time=lambda: float(TS)))


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode("utf-8")


def h_tag(signature_header: bytes) -> list[bytes]:
    """The h= list of a DKIM-Signature header, parsed with dkimpy."""
    (name, value), = dkim.rfc822_parse(signature_header + b"\r\n")[0]
    assert name == b"DKIM-Signature"
    tags = dkim.util.parse_tag_value(value)
    return [x.strip() for x in tags[b"h"].split(b":")]


def tags_of(signature_header: bytes) -> dict:
    (name, value), = dkim.rfc822_parse(signature_header + b"\r\n")[0]
    return dkim.util.parse_tag_value(value)


def reference_sign(message: bytes, pem: bytes, include_headers) -> bytes:
    """Pure dkimpy, pure-Python RSA (the thing we must match byte for byte)."""
    return dkim.sign(
        message,
        SELECTOR.encode(),
        DOMAIN.encode(),
        pem,
        canonicalize=(b"relaxed", b"relaxed"),
        include_headers=include_headers,
    )


PLAIN = crlf(
    "From: Alice Sender <alice@example.com>\n"
    "To: Bob <bob@example.org>\n"
    "Subject: Your receipt\n"
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\n"
    "Message-ID: <receipt-1@example.com>\n"
    "MIME-Version: 1.0\n"
    "Content-Type: text/plain; charset=utf-8\n"
    "Content-Transfer-Encoding: 7bit\n"
    "\n"
    "Thanks for your order.\n"
    "Total: 10.00 EUR\n"
)

MULTIPART = crlf(
    "From: \"Shop\" <no-reply@example.com>\n"
    "To: carol@example.net\n"
    "Cc: audit@example.com\n"
    "Reply-To: support@example.com\n"
    "Subject: Welcome\n"
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\n"
    "Message-ID: <welcome-42@example.com>\n"
    "List-Unsubscribe: <https://example.com/u/abc>, <mailto:u@example.com?subject=abc>\n"
    "List-Unsubscribe-Post: List-Unsubscribe=One-Click\n"
    "Feedback-ID: 42:welcome:tenant7:example\n"
    "X-Mailer: transactional-mail\n"
    "MIME-Version: 1.0\n"
    "Content-Type: multipart/alternative; boundary=\"b1_XYZ\"\n"
    "\n"
    "This is a multi-part message in MIME format.\n"
    "\n"
    "--b1_XYZ\n"
    "Content-Type: text/plain; charset=utf-8\n"
    "Content-Transfer-Encoding: quoted-printable\n"
    "\n"
    "Hello Carol, welcome =E2=9C=93\n"
    "\n"
    "--b1_XYZ\n"
    "Content-Type: text/html; charset=utf-8\n"
    "Content-Transfer-Encoding: base64\n"
    "\n"
    + base64.encodebytes("<p>Hello Carol, welcome ✓</p>".encode() * 10).decode()
    + "\n--b1_XYZ--\n"
)

FOLDED = crlf(
    "Received: from mx1.example.org by mx2.example.org; Tue, 14 Nov 2023 22:13:20 +0000\n"
    "Received: from client by mx1.example.org; Tue, 14 Nov 2023 22:13:19 +0000\n"
    "Return-Path: <bounce+123@example.com>\n"
    "From: Dave <dave@example.com>\n"
    "To: one@example.org,\n"
    "   two@example.org,\n"
    "\tthree@example.org\n"
    "Bcc: hidden@example.org\n"
    "Subject:   A   subject   with\n"
    "\t  odd    folding   \n"
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\n"
    "Message-ID:\n"
    " <folded@example.com>\n"
    "X-Custom:value-without-space\n"
    "\n"
    "Body with  internal   spaces\tand tabs\n"
)

UNICODE = (
    crlf(
        "From: =?UTF-8?B?w4lsb2RpZSBNw7xsbGVy?= <elodie@example.com>\n"
        "To: =?UTF-8?Q?J=C3=BCrgen?= <juergen@example.de>\n"
        "Subject: =?UTF-8?B?8J+OiSBCZXN0ZWxsdW5nIGLDqXN0w6R0aWd0?=\n"
        " =?UTF-8?Q?_=E2=80=94_Nr=2E_1234?=\n"
        "Date: Tue, 14 Nov 2023 22:13:20 +0000\n"
        "Message-ID: <unicode@example.com>\n"
        "MIME-Version: 1.0\n"
        "Content-Type: text/plain; charset=utf-8\n"
        "Content-Transfer-Encoding: 8bit\n"
        "\n"
    )
    + "Grüße aus Köln — 東京 — 🎉\r\nZweite Zeile\r\n".encode("utf-8")
)

LONG_LINES = crlf(
    "From: long@example.com\n"
    "To: x@example.org\n"
    "Subject: " + "very long subject " * 40 + "\n"
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\n"
    "\n"
    + "A" * 5000
    + "\n"
    + "word " * 2000
    + "\n"
)

TRAILING_WS = crlf(
    "From: ws@example.com\n"
    "To: x@example.org\n"
    "Subject: trailing whitespace   \n"
    "\n"
    "line with trailing spaces   \n"
    "line with trailing tab\t\n"
    "\n"
    "   \n"
    "\n"
    "\n"
)

EMPTY_BODY = crlf("From: empty@example.com\nTo: x@example.org\nSubject: nothing\n\n")

LF_ONLY = PLAIN.replace(b"\r\n", b"\n")

MESSAGES = {
    "plain": PLAIN,
    "multipart": MULTIPART,
    "folded_headers": FOLDED,
    "unicode_encoded_words": UNICODE,
    "long_lines": LONG_LINES,
    "trailing_whitespace_and_empty_lines": TRAILING_WS,
    "empty_body": EMPTY_BODY,
    "lf_line_endings": LF_ONLY,
}


# --------------------------------------------------------------------------
# Byte identity with pure dkimpy
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_default_headers_byte_identical_to_dkimpy(name, keypair, frozen_dkimpy_clock):
    message = MESSAGES[name]
    pem, _ = keypair
    fast = ds.sign(message, domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)
    assert fast == reference_sign(message, pem, h_tag(fast))


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_dkimpy_default_header_set_byte_identical(name, keypair, frozen_dkimpy_clock):
    """With dkimpy's own default h= list (include_headers=None) too."""
    message = MESSAGES[name]
    pem, _ = keypair
    reference = reference_sign(message, pem, None)
    dkimpy_default = dkim.DKIM(message).default_sign_headers()
    fast = ds.sign(
        message,
        domain=DOMAIN,
        selector=SELECTOR,
        private_pem=pem,
        headers=dkimpy_default,
        timestamp=TS,
    )
    assert fast == reference


@pytest.mark.parametrize(
    "headers",
    [
        [b"From"],
        [b"from", b"subject", b"to"],
        [b"From", b"To", b"Subject", b"From", b"Reply-To"],  # oversign + sign absent field
        ["From", "Subject"],  # str accepted
    ],
)
@pytest.mark.parametrize("name", ["plain", "folded_headers", "multipart"])
def test_explicit_headers_byte_identical_to_dkimpy(name, headers, keypair, frozen_dkimpy_clock):
    message = MESSAGES[name]
    pem, _ = keypair
    fast = ds.sign(
        message, domain=DOMAIN, selector=SELECTOR, private_pem=pem, headers=headers, timestamp=TS
    )
    assert fast == reference_sign(message, pem, headers)
    assert h_tag(fast) == [(h.encode() if isinstance(h, str) else h).lower() for h in headers]


def test_pkcs1_and_crlf_pem_variants_sign_identically(keypair, frozen_dkimpy_clock):
    pem, _ = keypair
    key = serialization.load_pem_private_key(pem, None)
    pkcs1 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    crlf_pem = pem.replace(b"\n", b"\r\n")
    sigs = {
        ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=p, timestamp=TS)
        for p in (pem, pkcs1, crlf_pem, pem.decode())
    }
    assert len(sigs) == 1
    sig = sigs.pop()
    assert sig == reference_sign(PLAIN, pkcs1, h_tag(sig))
    assert sig == reference_sign(PLAIN, pem, h_tag(sig))  # dkimpy parsing the PKCS#8 original


# --------------------------------------------------------------------------
# Verification with the unmodified dkimpy verifier
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_signature_verifies_with_dkimpy(name, keypair, dns):
    pem, _ = keypair
    signed = ds.sign_message(MESSAGES[name], domain=DOMAIN, selector=SELECTOR, private_pem=pem)
    assert ds.verify(signed, dns)
    # And straight through dkim.verify with our own resolver stub.
    assert dkim.verify(signed, dnsfunc=lambda n, timeout=5: dns[n.decode().rstrip(".")].encode())


def test_verify_helper_name_matching(keypair):
    pem, pub = keypair
    signed = ds.sign_message(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=pem)
    assert ds.verify(signed, {DNS_NAME.upper() + ".": ds.dns_record_value(pub)})
    assert not ds.verify(signed, {})
    assert not ds.verify(signed, {"other._domainkey.example.com": ds.dns_record_value(pub)})


def test_wrong_published_key_fails(keypair, other_keypair):
    pem, _ = keypair
    signed = ds.sign_message(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=pem)
    assert not ds.verify(signed, {DNS_NAME: ds.dns_record_value(other_keypair[1])})


def _replace_once(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, old
    return data.replace(old, new)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda m: _replace_once(m, b"10.00 EUR", b"99.00 EUR"), id="body-changed"),
        pytest.param(lambda m: m + b"P.S. click here\r\n", id="body-appended"),
        pytest.param(lambda m: m.replace(b"\r\n\r\nThanks", b"\r\n\r\nthanks"), id="body-case"),
        pytest.param(
            lambda m: _replace_once(m, b"Subject: Your receipt", b"Subject: Your refund"),
            id="subject-changed",
        ),
        pytest.param(
            lambda m: _replace_once(m, b"alice@example.com>", b"mallory@example.com>"),
            id="from-changed",
        ),
        pytest.param(
            lambda m: _replace_once(m, b"To: Bob", b"From: Mallory <m@evil.test>\r\nTo: Bob"),
            id="second-from-added",
        ),
        pytest.param(
            lambda m: _replace_once(m, b"To: Bob", b"Subject: Urgent\r\nTo: Bob"),
            id="second-subject-added",
        ),
        pytest.param(
            lambda m: _replace_once(m, b"Date: Tue, 14", b"Date: Wed, 15"), id="date-changed"
        ),
        pytest.param(lambda m: _replace_once(m, b"d=example.com", b"d=example.net"), id="d-tag"),
    ],
)
def test_tampering_fails_verification(tamper, keypair, dns):
    pem, pub = keypair
    signed = ds.sign_message(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=pem)
    assert ds.verify(signed, dns)
    tampered = tamper(signed)
    assert tampered != signed
    dns_both = dict(dns, **{f"{SELECTOR}._domainkey.example.net": ds.dns_record_value(pub)})
    assert not ds.verify(tampered, dns_both)


@pytest.mark.parametrize(
    "harmless",
    [
        pytest.param(lambda m: m.replace(b"Subject: Your receipt", b"subject:Your    receipt "), id="hdr-ws"),
        pytest.param(lambda m: m.replace(b"Total: 10.00", b"Total:   10.00"), id="body-ws"),
        pytest.param(lambda m: m + b"\r\n\r\n", id="trailing-empty-lines"),
        pytest.param(
            lambda m: m.replace(b"\r\nTo: Bob", b"\r\nX-Added-By-Relay: yes\r\nTo: Bob"),
            id="unsigned-header-added",
        ),
    ],
)
def test_relaxed_canonicalization_tolerates_whitespace(harmless, keypair, dns):
    pem, _ = keypair
    signed = ds.sign_message(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=pem)
    assert ds.verify(harmless(signed), dns)


# --------------------------------------------------------------------------
# Header selection and output format
# --------------------------------------------------------------------------


def test_default_signed_headers(keypair):
    pem, _ = keypair
    sig = ds.sign(MULTIPART, domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)
    h = h_tag(sig)
    for name in (
        b"from", b"to", b"cc", b"reply-to", b"subject", b"date", b"message-id",
        b"mime-version", b"content-type", b"list-unsubscribe", b"list-unsubscribe-post",
        b"feedback-id",
    ):
        assert name in h
        if name in ds.OVERSIGNED_HEADERS:
            assert h.count(name) == 2, name
    assert b"x-mailer" not in h

    sig = ds.sign(FOLDED, domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)
    h = h_tag(sig)
    assert h.count(b"from") == 2
    for name in (b"bcc", b"received", b"return-path", b"x-custom"):
        assert name not in h
    # Absent oversigned fields are listed once: their absence is signed (tests/dkim/
    # test_oversigning.py: one added afterwards fails dkimpy and Mail::DKIM).
    for name in (b"cc", b"list-unsubscribe", b"sender"):
        assert h.count(name) == 1, name


def test_signature_header_format(keypair):
    pem, _ = keypair
    sig = ds.sign(MULTIPART, domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)
    assert sig.startswith(b"DKIM-Signature: ")
    assert sig.endswith(b"\r\n") and not sig.endswith(b"\r\n\r\n")
    lines = sig[:-2].split(b"\r\n")
    assert b"\n" not in b"".join(lines) and b"\r" not in b"".join(lines)
    assert all(line.startswith(b" ") for line in lines[1:])
    assert max(len(line) for line in lines) <= 78
    tags = tags_of(sig)
    assert tags[b"v"] == b"1"
    assert tags[b"a"] == b"rsa-sha256"
    assert tags[b"c"] == b"relaxed/relaxed"
    assert tags[b"d"] == DOMAIN.encode()
    assert tags[b"s"] == SELECTOR.encode()
    assert tags[b"t"] == str(TS).encode()
    assert len(base64.b64decode(b"".join(tags[b"b"].split()))) == 256  # 2048-bit


def test_default_timestamp_is_now(keypair):
    pem, _ = keypair
    before = int(time.time())
    sig = ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=pem)
    assert before <= int(tags_of(sig)[b"t"]) <= int(time.time()) + 1


def test_sign_message_prepends_header(keypair):
    pem, _ = keypair
    kw = dict(domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)
    assert ds.sign_message(PLAIN, **kw) == ds.sign(PLAIN, **kw) + PLAIN


def test_idn_domain_is_punycoded(keypair):
    pem, pub = keypair
    signed = ds.sign_message(PLAIN, domain="bücher.example", selector=SELECTOR, private_pem=pem)
    assert b"d=xn--bcher-kva.example;" in signed
    assert ds.verify(signed, {f"{SELECTOR}._domainkey.xn--bcher-kva.example": ds.dns_record_value(pub)})


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def test_from_must_be_signed(keypair):
    pem, _ = keypair
    no_from = PLAIN.replace(b"From: Alice Sender <alice@example.com>\r\n", b"")
    with pytest.raises(ds.DKIMSigningError, match="From"):
        ds.sign(no_from, domain=DOMAIN, selector=SELECTOR, private_pem=pem)
    with pytest.raises(ds.DKIMSigningError, match="From"):
        ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=pem, headers=[b"Subject"])


def test_should_not_sign_headers_rejected(keypair):
    pem, _ = keypair
    with pytest.raises(ds.DKIMSigningError):
        ds.sign(FOLDED, domain=DOMAIN, selector=SELECTOR, private_pem=pem, headers=[b"From", b"Bcc"])


@pytest.mark.parametrize(
    "domain,selector",
    [
        ("example.com; t=1", SELECTOR),
        ("exa mple.com", SELECTOR),
        ("", SELECTOR),
        ("a..b", SELECTOR),
        (DOMAIN, "s1; d=evil.test"),
        (DOMAIN, ""),
        (DOMAIN, "sel\r\nX: y"),
    ],
)
def test_invalid_domain_or_selector(domain, selector, keypair):
    with pytest.raises(ds.DKIMSigningError):
        ds.sign(PLAIN, domain=domain, selector=selector, private_pem=keypair[0])


def test_bad_keys_rejected():
    with pytest.raises(ds.DKIMSigningError):
        ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=b"not a key")
    ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(ds.DKIMSigningError, match="RSA"):
        ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=ec_pem)


def test_invalid_header_name_rejected(keypair):
    with pytest.raises(ds.DKIMSigningError):
        ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=keypair[0], headers=[b"From", b"Sub ject"])


# --------------------------------------------------------------------------
# Keys and DNS record
# --------------------------------------------------------------------------


def test_dns_record_public_key_is_rsa_2048(keypair):
    pem, pub = keypair
    record = ds.dns_record_value(pub)
    assert record.startswith("v=DKIM1; k=rsa; p=")
    tags = dict(part.strip().split("=", 1) for part in record.split(";"))
    public = serialization.load_der_public_key(base64.b64decode(tags["p"], validate=True))
    assert isinstance(public, rsa.RSAPublicKey)
    assert public.key_size == 2048
    private = serialization.load_pem_private_key(pem, None)
    assert isinstance(private, rsa.RSAPrivateKey) and private.key_size == 2048
    assert public.public_numbers() == private.public_key().public_numbers()
    # dkimpy's own key-record parser agrees.
    pk, keysize, ktag, _ = dkim.evaluate_pk(DNS_NAME.encode(), record.encode())
    assert (keysize, ktag) == (2048, b"rsa")


def test_public_key_b64_matches_generate_key(keypair):
    pem, pub = keypair
    assert ds.public_key_b64(pem) == pub
    assert ds.public_key_b64(pem.decode()) == pub


def test_generated_keys_are_distinct(keypair, other_keypair):
    assert keypair[0] != other_keypair[0] and keypair[1] != other_keypair[1]


def test_dns_txt_strings_split(keypair):
    record = ds.dns_record_value(keypair[1])
    parts = ds.dns_txt_strings(record)
    assert len(parts) >= 2 and all(len(p) <= 255 for p in parts)
    assert "".join(parts) == record


def test_dns_record_value_rejects_garbage():
    with pytest.raises(ValueError):
        ds.dns_record_value("")
    with pytest.raises(ValueError):
        ds.dns_record_value("not base64!")


def test_loaded_keys_are_cached(keypair, monkeypatch):
    pem, _ = keypair
    ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=pem)

    def no_reload(*args, **kwargs):
        raise AssertionError("PEM reparsed by cryptography despite cache")

    monkeypatch.setattr(ds.serialization, "load_pem_private_key", no_reload)
    before = ds._load_key.cache_info().hits
    for _ in range(3):
        ds.sign(PLAIN, domain=DOMAIN, selector=SELECTOR, private_pem=bytes(pem))
    assert ds._load_key.cache_info().hits >= before + 3


# --------------------------------------------------------------------------
# dkimpy is left alone
# --------------------------------------------------------------------------


def test_signing_uses_openssl_not_dkimpy_rsa(keypair, dns, monkeypatch):
    """The pure-Python RSA is never reached on the fast path."""

    def forbidden(*args, **kwargs):
        raise AssertionError("pure-Python RSA used")

    monkeypatch.setattr(dkim, "RSASSA_PKCS1_v1_5_sign", forbidden)
    monkeypatch.setattr(dkim.crypto, "RSASSA_PKCS1_v1_5_sign", forbidden)
    signed = ds.sign_message(MULTIPART, domain=DOMAIN, selector=SELECTOR, private_pem=keypair[0])
    assert ds.verify(signed, dns)


def test_global_dkimpy_behaviour_unchanged(keypair, dns, frozen_dkimpy_clock):
    pem, _ = keypair
    originals = {
        "dkim.sign": dkim.sign,
        "dkim.verify": dkim.verify,
        "DKIM.sign": dkim.DKIM.sign,
        "DKIM.verify": dkim.DKIM.verify,
        "DKIM.gen_header": dkim.DKIM.gen_header,
        "dkim.RSASSA_sign": dkim.RSASSA_PKCS1_v1_5_sign,
        "crypto.RSASSA_sign": dkim.crypto.RSASSA_PKCS1_v1_5_sign,
        "crypto.RSASSA_verify": dkim.crypto.RSASSA_PKCS1_v1_5_verify,
        "parse_pem": dkim.parse_pem_private_key,
        "SHOULD": dkim.DKIM.SHOULD,
        "FROZEN": dkim.DKIM.FROZEN,
    }
    assert dkim.DKIM.gen_header is dkim.DomainSigner.gen_header
    # dkimpy's own result (default dkim.sign arguments: relaxed/simple, its default h=).
    before = dkim.sign(MULTIPART, SELECTOR.encode(), DOMAIN.encode(), pem)

    for message in MESSAGES.values():
        ds.sign(message, domain=DOMAIN, selector=SELECTOR, private_pem=pem, timestamp=TS)

    after = dkim.sign(MULTIPART, SELECTOR.encode(), DOMAIN.encode(), pem)
    assert after == before
    assert b"c=relaxed/simple" in after
    assert dkim.verify(after + MULTIPART, dnsfunc=lambda n, timeout=5: dns[n.decode().rstrip(".")].encode())
    assert ds.verify(after + MULTIPART, dns)
    assert originals == {
        "dkim.sign": dkim.sign,
        "dkim.verify": dkim.verify,
        "DKIM.sign": dkim.DKIM.sign,
        "DKIM.verify": dkim.DKIM.verify,
        "DKIM.gen_header": dkim.DKIM.gen_header,
        "dkim.RSASSA_sign": dkim.RSASSA_PKCS1_v1_5_sign,
        "crypto.RSASSA_sign": dkim.crypto.RSASSA_PKCS1_v1_5_sign,
        "crypto.RSASSA_verify": dkim.crypto.RSASSA_PKCS1_v1_5_verify,
        "parse_pem": dkim.parse_pem_private_key,
        "SHOULD": dkim.DKIM.SHOULD,
        "FROZEN": dkim.DKIM.FROZEN,
    }
    fresh = dkim.DKIM(MULTIPART)
    assert fresh.frozen_sign == {b"from"}
    assert fresh.should_sign == set(dkim.DKIM.SHOULD)
    assert dkim.DKIM.gen_header is dkim.DomainSigner.gen_header
