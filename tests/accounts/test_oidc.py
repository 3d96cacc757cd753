"""OpenID Connect client against a real provider (panva/oidc-provider on loopback)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from chalicelib.services.accounts import oidc
from chalicelib.services.accounts.oidc import OIDCConfig, OIDCError
from tests import oidc_support

REDIRECT_URI = "http://127.0.0.1:9/sso/callback"  # never requested


def config_for(provider: oidc_support.Provider, **overrides) -> OIDCConfig:
    values = dict(
        issuer=provider.issuer,
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        redirect_uri=provider.redirect_uri,
    )
    values.update(overrides)
    return OIDCConfig(**values)


@pytest.fixture(scope="module")
def provider():
    p = oidc_support.start_provider(REDIRECT_URI)
    yield p
    p.stop()


@pytest.fixture(autouse=True)
def _fresh_caches():
    oidc.clear_caches()
    yield
    oidc.clear_caches()


@pytest.fixture
def config(provider):
    return config_for(provider)


def login(config: OIDCConfig, user: str = "alice"):
    start = oidc.start_login(config)
    code, state = oidc_support.drive_login(start.authorization_url, login=user)
    assert state == start.state
    return start, code


def mint(provider, claims: dict, *, key: dict | None = None, alg: str = "RS256", headers: dict | None = None) -> str:
    """An ID token signed with the provider's own key (or ``key``)."""
    jwk = key or provider.signing_key
    private = jwt.PyJWK(jwk, algorithm=alg).key
    return jwt.encode(claims, private, algorithm=alg, headers={"kid": jwk["kid"], **(headers or {})})


def base_claims(provider, nonce: str, /, **overrides) -> dict:
    now = int(time.time())
    claims = {
        "iss": provider.issuer,
        "sub": "alice",
        "aud": provider.client_id,
        "iat": now,
        "exp": now + 300,
        "nonce": nonce,
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# --------------------------------------------------------------------------
# the round trip
# --------------------------------------------------------------------------


def test_start_login_builds_pkce_authorization_url(config):
    start = oidc.start_login(config)
    parts = urlsplit(start.authorization_url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert start.authorization_url.startswith(oidc.discover(config.issuer)["authorization_endpoint"])
    assert query["response_type"] == "code"
    assert query["client_id"] == config.client_id
    assert query["redirect_uri"] == REDIRECT_URI
    assert query["scope"] == "openid email profile"
    assert query["state"] == start.state and query["nonce"] == start.nonce
    assert query["code_challenge_method"] == "S256"
    assert query["code_challenge"] == b64url(hashlib.sha256(start.code_verifier.encode()).digest())
    assert "code_verifier" not in query
    for secret in (start.state, start.nonce, start.code_verifier):
        assert len(secret) >= 43  # >= 256 bits base64url
    assert 43 <= len(start.code_verifier) <= 128
    other = oidc.start_login(config)
    assert {other.state, other.nonce, other.code_verifier}.isdisjoint(
        {start.state, start.nonce, start.code_verifier}
    )
    assert start.code_verifier not in repr(start)


def test_round_trip_gives_verified_email_from_userinfo(config, provider, monkeypatch):
    calls = []
    real_userinfo = oidc._userinfo
    monkeypatch.setattr(oidc, "_userinfo", lambda *a: calls.append(a) or real_userinfo(*a))
    start, code = login(config)
    identity = oidc.complete_login(config, code=code, code_verifier=start.code_verifier, nonce=start.nonce)
    assert len(calls) == 1  # the ID token of the code flow has no email: userinfo was asked
    assert identity == oidc.Identity(
        subject="alice",
        email="alice@example.com",
        email_verified=True,
        name="Alice Example",
        given_name="Alice",
        family_name="Example",
        issuer=provider.issuer,
    )


def test_unverified_email_is_reported_unverified(config):
    start, code = login(config, user="mallory")
    identity = oidc.complete_login(config, code=code, code_verifier=start.code_verifier, nonce=start.nonce)
    assert identity.email == "mallory@example.com"
    assert identity.email_verified is False


def test_unknown_account_cannot_log_in(config):
    start = oidc.start_login(config)
    with pytest.raises(oidc_support.AuthorizationErrorRedirect) as refused:
        oidc_support.drive_login(start.authorization_url, login="nobody")
    assert refused.value.error == "access_denied"
    assert refused.value.state == start.state


def test_es256_client_secret_post_claims_in_id_token(monkeypatch):
    """Another provider: ES256 ID tokens with the claims inside, client_secret_post, a password."""
    accounts = {"bob": {"email": "bob@example.org", "email_verified": "true", "name": "Bob", "password": "pw"}}
    with oidc_support.start_provider(
        REDIRECT_URI,
        accounts,
        id_token_alg="ES256",
        token_endpoint_auth_method="client_secret_post",
        id_token_claims=True,
    ) as p:
        config = config_for(p, token_endpoint_auth_method="client_secret_post")
        start = oidc.start_login(config)
        with pytest.raises(oidc_support.AuthorizationErrorRedirect, match="wrong password"):
            oidc_support.drive_login(start.authorization_url, login="bob", password="nope")
        start = oidc.start_login(config)
        code, state = oidc_support.drive_login(start.authorization_url, login="bob", password="pw")
        assert state == start.state
        monkeypatch.setattr(oidc, "_userinfo", lambda *a: pytest.fail("userinfo not needed"))
        identity = oidc.complete_login(config, code=code, code_verifier=start.code_verifier, nonce=start.nonce)
    assert (identity.subject, identity.email, identity.email_verified, identity.name) == (
        "bob",
        "bob@example.org",
        True,
        "Bob",
    )
    assert identity.given_name is None


# --------------------------------------------------------------------------
# what must be refused
# --------------------------------------------------------------------------


def test_wrong_nonce_refused(config):
    start, code = login(config)
    with pytest.raises(OIDCError, match="nonce"):
        oidc.complete_login(config, code=code, code_verifier=start.code_verifier, nonce="not-the-nonce")


def test_reused_code_refused_by_provider(config):
    start, code = login(config)
    oidc.complete_login(config, code=code, code_verifier=start.code_verifier, nonce=start.nonce)
    with pytest.raises(OIDCError, match="invalid_grant"):
        oidc.complete_login(config, code=code, code_verifier=start.code_verifier, nonce=start.nonce)


def test_wrong_code_verifier_refused_by_provider(config):
    start, code = login(config)
    other = oidc.start_login(config)
    with pytest.raises(OIDCError, match="invalid_grant"):
        oidc.complete_login(config, code=code, code_verifier=other.code_verifier, nonce=start.nonce)


def test_wrong_client_secret_refused(config, provider):
    start, code = login(config)
    bad = config_for(provider, client_secret="wrong-secret")
    with pytest.raises(OIDCError, match="invalid_client.*client_secret"):
        oidc.complete_login(bad, code=code, code_verifier=start.code_verifier, nonce=start.nonce)


def test_discovery_issuer_mismatch_refused(provider):
    with pytest.raises(OIDCError, match="names issuer"):
        oidc.discover(provider.issuer + "/")


def test_non_https_issuer_refused():
    with pytest.raises(OIDCError, match="https"):
        oidc.discover("http://idp.example.com")


def test_valid_minted_token_accepted(config, provider):
    """Control for the tests below: a token signed with the provider's key passes."""
    claims = oidc.validate_id_token(config, mint(provider, base_claims(provider, "n1")), "n1")
    assert claims["sub"] == "alice"


def test_forged_id_token_refused(config, provider):
    other = oidc_support.generate_signing_jwk("RS256", kid=provider.signing_key["kid"])
    forged = mint(provider, base_claims(provider, "n1"), key=other)
    with pytest.raises(OIDCError, match="signature"):
        oidc.validate_id_token(config, forged, "n1")
    unknown_kid = mint(provider, base_claims(provider, "n1"), key=oidc_support.generate_signing_jwk("RS256"))
    with pytest.raises(OIDCError, match="no RS256 signing key"):
        oidc.validate_id_token(config, unknown_kid, "n1")


def test_alg_none_refused(config, provider):
    token = jwt.encode(base_claims(provider, "n1"), None, algorithm="none")
    with pytest.raises(OIDCError, match="'none'"):
        oidc.validate_id_token(config, token, "n1")
    # Same, with an empty signature appended and the provider's kid.
    header = b64url(json.dumps({"alg": "none", "kid": provider.signing_key["kid"]}).encode())
    payload = b64url(json.dumps(base_claims(provider, "n1")).encode())
    with pytest.raises(OIDCError, match="alg"):
        oidc.validate_id_token(config, f"{header}.{payload}.", "n1")


def test_hs256_with_public_key_as_secret_refused(config, provider):
    """Algorithm confusion: HMAC keyed with the provider's public key."""
    public_pem = jwt.PyJWK(oidc_support.public_jwk(provider.signing_key)).key.public_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    header = b64url(json.dumps({"alg": "HS256", "kid": provider.signing_key["kid"]}).encode())
    payload = b64url(json.dumps(base_claims(provider, "n1")).encode())
    signature = b64url(hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest())
    with pytest.raises(OIDCError, match="HS256"):
        oidc.validate_id_token(config, f"{header}.{payload}.{signature}", "n1")


def test_expired_token_refused(config, provider):
    now = int(time.time())
    token = mint(provider, base_claims(provider, "n1", iat=now - 7200, exp=now - 3600))
    with pytest.raises(OIDCError, match="expired"):
        oidc.validate_id_token(config, token, "n1")


def test_token_from_the_future_refused(config, provider):
    now = int(time.time())
    token = mint(provider, base_claims(provider, "n1", iat=now + 3600, exp=now + 7200))
    with pytest.raises(OIDCError, match="not valid yet"):
        oidc.validate_id_token(config, token, "n1")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"iss": "http://127.0.0.1:1"}, "another issuer"),
        ({"aud": "someone-else"}, "aud"),
        ({"aud": ["someone-else", "CLIENT"]}, "azp"),
        ({"aud": ["someone-else", "CLIENT"], "azp": "someone-else"}, "azp"),
        ({"azp": "someone-else"}, "azp"),
        ({"nonce": None}, "nonce"),
        ({"exp": None}, "'exp'"),
        ({"sub": None}, "'sub'"),
    ],
)
def test_bad_claims_refused(config, provider, overrides, message):
    overrides = {k: (provider.client_id if v == "CLIENT" else v) for k, v in overrides.items()}
    if isinstance(overrides.get("aud"), list):
        overrides["aud"] = [provider.client_id if a == "CLIENT" else a for a in overrides["aud"]]
    token = mint(provider, base_claims(provider, "n1", **overrides))
    with pytest.raises(OIDCError, match=message):
        oidc.validate_id_token(config, token, "n1")


def test_multiple_audiences_with_matching_azp_accepted(config, provider):
    token = mint(provider, base_claims(provider, "n1", aud=["other", provider.client_id], azp=provider.client_id))
    assert oidc.validate_id_token(config, token, "n1")["azp"] == provider.client_id


def test_at_hash_mismatch_refused(config, provider):
    token = mint(provider, base_claims(provider, "n1", at_hash="AAAAAAAAAAAAAAAAAAAAAA"))
    with pytest.raises(OIDCError, match="at_hash"):
        oidc.validate_id_token(config, token, "n1", access_token="some-access-token")
