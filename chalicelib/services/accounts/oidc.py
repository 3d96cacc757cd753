"""OpenID Connect single sign-on: the relying-party (client) side.

Why one module of ~560 lines: it is one protocol client (discovery, PKCE, the token
exchange, ID token validation against the provider's JWKS, their caches), written and tested
as a unit; nothing else in the service speaks OIDC.

Authorization code flow with PKCE (S256), for confidential clients
(``client_secret_basic`` / ``client_secret_post``) and public clients
(``client_secret=None``). Plain functions, no web framework:

1. ``start_login(config)`` returns the URL to redirect the browser to, plus
   ``state``, ``nonce`` and ``code_verifier``. The CALLER persists those three
   server-side (e.g. a row keyed by a hash of ``state``, short TTL, single use)
   and, on the callback, looks the row up by the returned ``state`` (unknown
   or already used state = refuse; that check is the caller's job).
2. ``complete_login(config, code=..., code_verifier=..., nonce=...)`` exchanges
   the code at the token endpoint, validates the ID token
   (``validate_id_token``) and returns an ``Identity``. If the ID token does
   not carry the email claims (the spec's default for the code flow), they are
   read from the userinfo endpoint, whose ``sub`` must match.

Every failure raises ``OIDCError`` (the API maps it to the ``SSOError`` code).
Its message says what was wrong and is safe to log; it does not contain
secrets or tokens. Only trust ``Identity.email`` for account matching when
``Identity.email_verified`` is true.

HTTP uses ``requests`` with timeouts and no redirects; JWT/JWK handling is
PyJWT (``jwt.PyJWKSet`` / ``jwt.PyJWK`` / ``jwt.decode``), no hand-rolled crypto.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    import jwt
    import requests

__all__ = [
    "ALLOWED_ID_TOKEN_ALGS",
    "Identity",
    "LoginStart",
    "OIDCConfig",
    "OIDCError",
    "clear_caches",
    "complete_login",
    "discover",
    "start_login",
    "validate_id_token",
]

# Asymmetric algorithms only: "none" and HS* (which a provider's *public* key
# must never be used as a secret for) are never accepted.
ALLOWED_ID_TOKEN_ALGS = ("RS256", "ES256", "PS256")
_ALG_KEY_TYPES = {"RS256": ("RSA", None), "PS256": ("RSA", None), "ES256": ("EC", "P-256")}

HTTP_TIMEOUT = (5, 10)  # (connect, read) seconds
DISCOVERY_TTL = 3600.0  # seconds a discovery document is reused
JWKS_TTL = 3600.0  # seconds a JWK Set is reused
JWKS_MIN_REFRESH_INTERVAL = 30.0  # an unknown kid refetches the JWKS at most this often
LEEWAY = 60  # seconds of clock skew accepted on exp / iat / nbf
MAX_RESPONSE_BYTES = 1_000_000


class OIDCError(Exception):
    """Single sign-on failed; the message says why (safe to log, no secrets)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class OIDCConfig:
    issuer: str
    client_id: str
    client_secret: str | None = field(repr=False)
    redirect_uri: str
    scopes: str = "openid email profile"
    # None = choose from discovery (client_secret_basic preferred, then
    # client_secret_post; "none" for a public client without secret).
    token_endpoint_auth_method: str | None = None


@dataclass(frozen=True)
class LoginStart:
    authorization_url: str
    state: str
    nonce: str
    code_verifier: str

    def __repr__(self) -> str:  # keep the secrets out of logs
        return f"LoginStart(authorization_url={self.authorization_url!r}, state=..., nonce=..., code_verifier=...)"


@dataclass(frozen=True)
class Identity:
    subject: str
    email: str | None
    email_verified: bool
    name: str | None
    given_name: str | None
    family_name: str | None
    issuer: str


# --------------------------------------------------------------------------
# HTTP helpers
# --------------------------------------------------------------------------


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_url(url: Any, what: str, *, issuer: str) -> str:
    """An endpoint must be https (http only on loopback, for local providers)."""
    if not isinstance(url, str) or not url:
        raise OIDCError(f"the discovery document of {issuer} has no {what}")
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.netloc:
        return url
    if parts.scheme == "http" and _is_loopback(parts.hostname):
        return url
    raise OIDCError(f"the {what} of {issuer} must be an https URL, got {url!r}")


def _json_response(response: requests.Response, what: str) -> dict:
    if len(response.content) > MAX_RESPONSE_BYTES:
        raise OIDCError(f"the {what} response is too large")
    try:
        body = response.json()
    except ValueError:
        raise OIDCError(
            f"the {what} did not answer JSON (HTTP {response.status_code}, "
            f"Content-Type {response.headers.get('Content-Type')!r})"
        ) from None
    if not isinstance(body, dict):
        raise OIDCError(f"the {what} answered JSON that is not an object")
    return body


def _get_json(url: str, what: str, **kwargs: Any) -> dict:
    import requests  # imported lazily: cold start

    try:
        response = requests.get(url, timeout=HTTP_TIMEOUT, allow_redirects=False, **kwargs)
    except requests.RequestException as exc:
        raise OIDCError(f"could not reach the {what} at {url}: {exc.__class__.__name__}") from None
    if response.status_code != 200:
        raise OIDCError(f"the {what} at {url} answered HTTP {response.status_code}")
    return _json_response(response, what)


# --------------------------------------------------------------------------
# discovery and JWKS, cached
# --------------------------------------------------------------------------

_lock = threading.Lock()
_discovery_cache: dict[str, tuple[float, dict]] = {}
_jwks_cache: dict[str, tuple[float, list[dict]]] = {}  # uri -> (fetched_at, keys)


def clear_caches() -> None:
    """Forget cached discovery documents and JWK Sets (tests, config changes)."""
    with _lock:
        _discovery_cache.clear()
        _jwks_cache.clear()


def discover(issuer: str) -> dict:
    """The provider's discovery document (``/.well-known/openid-configuration``).

    Cached for ``DISCOVERY_TTL`` seconds. The document's ``issuer`` must equal
    the configured issuer exactly, and the endpoints used here must be https
    (or http on a loopback address).
    """
    if not isinstance(issuer, str) or not issuer:
        raise OIDCError("the SSO issuer is not configured")
    parts = urlsplit(issuer)
    if parts.query or parts.fragment or not (
        (parts.scheme == "https" and parts.netloc)
        or (parts.scheme == "http" and _is_loopback(parts.hostname))
    ):
        raise OIDCError(f"the SSO issuer must be an https URL without query or fragment, got {issuer!r}")

    now = time.monotonic()
    with _lock:
        cached = _discovery_cache.get(issuer)
        if cached and cached[0] > now:
            return cached[1]

    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    document = _get_json(url, "OpenID discovery endpoint")
    if document.get("issuer") != issuer:
        raise OIDCError(
            f"the discovery document at {url} names issuer {document.get('issuer')!r}, "
            f"not the configured {issuer!r}; fix the configured issuer"
        )
    _check_url(document.get("authorization_endpoint"), "authorization_endpoint", issuer=issuer)
    _check_url(document.get("token_endpoint"), "token_endpoint", issuer=issuer)
    _check_url(document.get("jwks_uri"), "jwks_uri", issuer=issuer)
    if document.get("userinfo_endpoint") is not None:
        _check_url(document["userinfo_endpoint"], "userinfo_endpoint", issuer=issuer)

    with _lock:
        _discovery_cache[issuer] = (now + DISCOVERY_TTL, document)
    return document


def _fetch_jwks(jwks_uri: str) -> list[dict]:
    body = _get_json(jwks_uri, "JWKS endpoint")
    keys = body.get("keys")
    import jwt  # imported lazily: cold start

    try:
        jwt.PyJWKSet(keys)  # validates that at least one key is usable
    except jwt.PyJWTError as exc:
        raise OIDCError(f"the JWK Set at {jwks_uri} is unusable: {exc}") from None
    return [k for k in keys if isinstance(k, dict)]


def _jwks(jwks_uri: str, *, refresh: bool = False) -> list[dict]:
    now = time.monotonic()
    with _lock:
        cached = _jwks_cache.get(jwks_uri)
    if cached:
        fetched_at, keys = cached
        age = now - fetched_at
        if age < JWKS_TTL and not (refresh and age >= JWKS_MIN_REFRESH_INTERVAL):
            return keys
    keys = _fetch_jwks(jwks_uri)
    with _lock:
        _jwks_cache[jwks_uri] = (time.monotonic(), keys)
    return keys


def _select_key(keys: list[dict], kid: str | None, alg: str) -> dict | None:
    kty, crv = _ALG_KEY_TYPES[alg]
    candidates = []
    for key in keys:
        if key.get("kty") != kty or (crv and key.get("crv") != crv):
            continue
        if key.get("use") not in (None, "sig"):
            continue
        if key.get("alg") not in (None, alg):
            continue
        if kid is not None and key.get("kid") != kid:
            continue
        candidates.append(key)
    if kid is None and len(candidates) > 1:
        return None  # ambiguous without a kid
    return candidates[0] if candidates else None


def _signing_key(jwks_uri: str, header: dict) -> jwt.PyJWK:
    alg = header.get("alg")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise OIDCError("the ID token header has an invalid kid")
    key = _select_key(_jwks(jwks_uri), kid, alg)
    if key is None:  # maybe the provider rotated its keys: refetch (rate limited)
        key = _select_key(_jwks(jwks_uri, refresh=True), kid, alg)
    if key is None:
        raise OIDCError(
            f"no {alg} signing key "
            + (f"with kid {kid!r} " if kid else "(and the token names no kid) ")
            + f"in the provider's JWK Set at {jwks_uri}"
        )
    import jwt  # imported lazily: cold start

    try:
        return jwt.PyJWK(key, algorithm=alg)
    except jwt.PyJWTError as exc:
        raise OIDCError(f"the provider's signing key is unusable: {exc}") from None


# --------------------------------------------------------------------------
# the flow
# --------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _validate_config(config: OIDCConfig) -> None:
    if not config.client_id:
        raise OIDCError("the SSO client_id is not configured")
    parts = urlsplit(config.redirect_uri or "")
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.fragment:
        raise OIDCError(f"the SSO redirect_uri must be an absolute URL, got {config.redirect_uri!r}")
    if "openid" not in config.scopes.split():
        raise OIDCError("the SSO scopes must include 'openid'")


def start_login(config: OIDCConfig, *, login_hint: str | None = None, prompt: str | None = None) -> LoginStart:
    """Build the authorization URL; return it with the secrets the caller must store.

    ``state``, ``nonce`` and ``code_verifier`` are each 256 random bits from
    ``secrets``; the code challenge is S256.
    """
    _validate_config(config)
    document = discover(config.issuer)
    response_types = document.get("response_types_supported")
    if isinstance(response_types, list) and "code" not in response_types:
        raise OIDCError(f"the provider {config.issuer} does not support the authorization code flow")
    methods = document.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise OIDCError(f"the provider {config.issuer} does not support PKCE with S256")

    state = secrets.token_urlsafe(32)
    nonce = secrets.token_urlsafe(32)
    code_verifier = secrets.token_urlsafe(64)  # 86 chars, within RFC 7636's 43..128
    code_challenge = _b64url(hashlib.sha256(code_verifier.encode("ascii")).digest())

    params = {
        "response_type": "code",
        "client_id": config.client_id,
        "redirect_uri": config.redirect_uri,
        "scope": config.scopes,
        "state": state,
        "nonce": nonce,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
    }
    if login_hint:
        params["login_hint"] = login_hint
    if prompt:
        params["prompt"] = prompt
    endpoint = urlsplit(document["authorization_endpoint"])
    query = parse_qsl(endpoint.query, keep_blank_values=True) + list(params.items())
    url = urlunsplit(endpoint._replace(query=urlencode(query, quote_via=quote)))
    return LoginStart(authorization_url=url, state=state, nonce=nonce, code_verifier=code_verifier)


def _token_auth_method(config: OIDCConfig, document: dict) -> str:
    if config.token_endpoint_auth_method:
        method = config.token_endpoint_auth_method
        if method not in ("client_secret_basic", "client_secret_post", "none"):
            raise OIDCError(f"unsupported token_endpoint_auth_method {method!r}")
        if method != "none" and not config.client_secret:
            raise OIDCError(f"{method} needs a client_secret; none is configured")
        return method
    if not config.client_secret:
        return "none"
    supported = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    for method in ("client_secret_basic", "client_secret_post"):
        if method in supported:
            return method
    raise OIDCError(
        f"the provider {config.issuer} supports neither client_secret_basic nor client_secret_post "
        f"for the token endpoint (it lists {supported})"
    )


def _exchange_code(config: OIDCConfig, document: dict, code: str, code_verifier: str) -> dict:
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": config.redirect_uri,
        "code_verifier": code_verifier,
    }
    headers = {"Accept": "application/json"}
    method = _token_auth_method(config, document)
    if method == "client_secret_basic":
        # RFC 6749 section 2.3.1: form-urlencode id and secret, then Basic.
        pair = f"{quote(config.client_id, safe='')}:{quote(config.client_secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    elif method == "client_secret_post":
        data["client_id"] = config.client_id
        data["client_secret"] = config.client_secret
    else:
        data["client_id"] = config.client_id

    url = document["token_endpoint"]
    import requests  # imported lazily: cold start

    try:
        response = requests.post(url, data=data, headers=headers, timeout=HTTP_TIMEOUT, allow_redirects=False)
    except requests.RequestException as exc:
        raise OIDCError(f"could not reach the token endpoint at {url}: {exc.__class__.__name__}") from None

    if response.status_code != 200:
        try:
            body = response.json()
        except ValueError:
            body = {}
        error = body.get("error") if isinstance(body, dict) else None
        description = body.get("error_description") if isinstance(body, dict) else None
        hint = {
            "invalid_client": "check the SSO client_id and client_secret",
            "invalid_grant": "the code is invalid, expired or already used, or the PKCE verifier "
            "or redirect_uri does not match; start the login again",
            "unauthorized_client": "the client is not allowed the authorization_code grant",
        }.get(error or "", "")
        raise OIDCError(
            f"the token endpoint refused the code exchange (HTTP {response.status_code}"
            + (f", {error}" if error else "")
            + (f": {str(description)[:200]}" if description else "")
            + ")"
            + (f"; {hint}" if hint else "")
        )
    tokens = _json_response(response, "token endpoint")
    if not isinstance(tokens.get("id_token"), str):
        raise OIDCError("the token endpoint returned no id_token; is 'openid' among the requested scopes?")
    token_type = tokens.get("token_type")
    if tokens.get("access_token") is not None and not (
        isinstance(token_type, str) and token_type.lower() == "bearer"
    ):
        raise OIDCError(f"the token endpoint returned an unexpected token_type {token_type!r}")
    return tokens


def validate_id_token(config: OIDCConfig, id_token: str, nonce: str, *, access_token: str | None = None) -> dict:
    """Validate an ID token and return its claims.

    Checks: the alg is one of ``ALLOWED_ID_TOKEN_ALGS``; the signature against
    the provider's JWK Set; ``iss`` equals the issuer; ``aud`` contains the
    client_id (and ``azp`` equals it when present or when there are several
    audiences); ``exp``, ``iat`` (and ``nbf`` if present) within ``LEEWAY``;
    ``sub`` present; ``nonce`` equals ``nonce``; ``at_hash`` matches
    ``access_token`` when both are present.
    """
    if not nonce:
        raise OIDCError("no nonce to check the ID token against (the login was not started properly)")
    if not isinstance(id_token, str) or id_token.count(".") != 2:
        raise OIDCError("the ID token is not a signed JWT")
    document = discover(config.issuer)
    import jwt  # imported lazily: cold start

    try:
        header = jwt.get_unverified_header(id_token)
    except jwt.PyJWTError:
        raise OIDCError("the ID token is malformed") from None
    alg = header.get("alg")
    if alg not in ALLOWED_ID_TOKEN_ALGS:
        raise OIDCError(
            f"the ID token is signed with alg {alg!r}; only {', '.join(ALLOWED_ID_TOKEN_ALGS)} are accepted"
        )
    if header.get("crit"):
        raise OIDCError("the ID token has critical header parameters this client does not understand")

    key = _signing_key(document["jwks_uri"], header)
    try:
        claims = jwt.decode(
            id_token,
            key=key,
            algorithms=[alg],
            audience=config.client_id,
            issuer=config.issuer,
            leeway=LEEWAY,
            options={"require": ["iss", "sub", "aud", "exp", "iat"], "strict_aud": False},
        )
    except jwt.InvalidSignatureError:
        raise OIDCError("the ID token signature does not verify against the provider's keys") from None
    except jwt.ExpiredSignatureError:
        raise OIDCError("the ID token has expired (check the server clock if this persists)") from None
    except jwt.ImmatureSignatureError:
        raise OIDCError("the ID token is not valid yet (iat/nbf in the future; check the server clock)") from None
    except jwt.InvalidAudienceError:
        raise OIDCError("the ID token was not issued to this client_id (aud)") from None
    except jwt.InvalidIssuerError:
        raise OIDCError("the ID token was issued by another issuer (iss)") from None
    except jwt.MissingRequiredClaimError as exc:
        raise OIDCError(f"the ID token lacks the required {exc.claim!r} claim") from None
    except jwt.PyJWTError as exc:
        raise OIDCError(f"the ID token is invalid: {exc}") from None

    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != config.client_id:
        raise OIDCError("the ID token's authorized party (azp) is not this client_id")
    if not isinstance(claims["sub"], str) or not claims["sub"]:
        raise OIDCError("the ID token has an empty subject (sub)")
    token_nonce = claims.get("nonce")
    if not isinstance(token_nonce, str) or not hmac.compare_digest(token_nonce.encode(), nonce.encode()):
        raise OIDCError("the ID token's nonce does not match this login; start the login again")
    at_hash = claims.get("at_hash")
    if at_hash is not None and access_token is not None:
        # All allowed algs use SHA-256: at_hash is the left half, base64url.
        digest = hashlib.sha256(access_token.encode("ascii")).digest()
        if not hmac.compare_digest(str(at_hash).encode(), _b64url(digest[: len(digest) // 2]).encode()):
            raise OIDCError("the ID token's at_hash does not match the access token")
    return claims


def _userinfo(document: dict, access_token: str, subject: str) -> dict:
    url = document["userinfo_endpoint"]
    import requests  # imported lazily: cold start

    try:
        response = requests.get(
            url,
            headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
            timeout=HTTP_TIMEOUT,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        raise OIDCError(f"could not reach the userinfo endpoint at {url}: {exc.__class__.__name__}") from None
    if response.status_code != 200:
        raise OIDCError(f"the userinfo endpoint at {url} answered HTTP {response.status_code}")
    if response.headers.get("Content-Type", "").split(";")[0].strip().lower() == "application/jwt":
        raise OIDCError("the userinfo endpoint answers signed JWTs; configure the client for plain JSON userinfo")
    claims = _json_response(response, "userinfo endpoint")
    if claims.get("sub") != subject:
        raise OIDCError("the userinfo endpoint answered for another subject than the ID token")
    return claims


def _str_claim(claims: dict, name: str) -> str | None:
    value = claims.get(name)
    return value if isinstance(value, str) and value else None


def complete_login(config: OIDCConfig, *, code: str, code_verifier: str, nonce: str) -> Identity:
    """Exchange ``code`` and return the authenticated user's ``Identity``.

    ``code_verifier`` and ``nonce`` are the values ``start_login`` returned for
    the ``state`` the callback carried (looked up by the caller).
    """
    _validate_config(config)
    if not code or not isinstance(code, str):
        raise OIDCError("the callback carried no authorization code")
    if not code_verifier or not nonce:
        raise OIDCError("the stored login state is incomplete (no code_verifier or nonce)")
    document = discover(config.issuer)
    tokens = _exchange_code(config, document, code, code_verifier)
    access_token = tokens.get("access_token") if isinstance(tokens.get("access_token"), str) else None
    claims = validate_id_token(config, tokens["id_token"], nonce, access_token=access_token)

    wanted = ("email", "email_verified", "name", "given_name", "family_name")
    if "email" not in claims and access_token and document.get("userinfo_endpoint"):
        info = _userinfo(document, access_token, claims["sub"])
        claims = {**{k: info[k] for k in wanted if k in info}, **claims}

    verified = claims.get("email_verified")
    # Some providers send the string "true"; anything else is not verified.
    email_verified = verified is True or (isinstance(verified, str) and verified.lower() == "true")
    return Identity(
        subject=claims["sub"],
        email=_str_claim(claims, "email"),
        email_verified=email_verified and _str_claim(claims, "email") is not None,
        name=_str_claim(claims, "name"),
        given_name=_str_claim(claims, "given_name"),
        family_name=_str_claim(claims, "family_name"),
        issuer=claims["iss"],
    )
