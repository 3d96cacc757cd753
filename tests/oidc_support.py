"""A real OpenID Connect provider for tests, and a browser-less login driver.

The provider is panva's ``oidc-provider`` (npm, version pinned in
``tests/oidc_provider/package.json``) started as a Node process on 127.0.0.1
by ``tests/oidc_provider/server.js``. Nothing here fakes the protocol: the
tests talk to a certified implementation over HTTP.

Typical use in a test module::

    from tests import oidc_support

    @pytest.fixture(scope="module")
    def provider():
        p = oidc_support.start_provider("http://127.0.0.1:9/sso/callback")
        yield p
        p.stop()

    def test_login(provider):
        config = OIDCConfig(issuer=provider.issuer, client_id=provider.client_id,
                            client_secret=provider.client_secret,
                            redirect_uri=provider.redirect_uri)
        start = oidc.start_login(config)
        code, state = oidc_support.drive_login(start.authorization_url, login="alice")

``start_provider`` skips the calling test (``pytest.skip``) when ``node`` is
not installed; any other failure (npm, the process not starting) is an error.
CI installs the provider up front with
``npm ci --no-audit --no-fund --prefix tests/oidc_provider``; locally
``ensure_installed()`` does it on first use.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc_provider"
READY_PREFIX = "OIDC_PROVIDER_READY "
START_TIMEOUT = 20.0
HTTP_TIMEOUT = 10.0

DEFAULT_ACCOUNTS: dict[str, dict] = {
    "alice": {
        "email": "alice@example.com",
        "email_verified": True,
        "name": "Alice Example",
        "given_name": "Alice",
        "family_name": "Example",
    },
    "mallory": {
        "email": "mallory@example.com",
        "email_verified": False,
        "name": "Mallory Unverified",
    },
}


class ProviderError(RuntimeError):
    """The test provider could not be installed, started or driven."""


class AuthorizationErrorRedirect(ProviderError):
    """The provider sent the browser back to the redirect_uri with ``error=...``.

    E.g. ``access_denied`` for an unknown account or a wrong password.
    ``location`` is the full callback URL (to feed an HTTP-level callback test).
    """

    def __init__(self, error: str, description: str, state: str | None, location: str) -> None:
        super().__init__(f"the provider redirected back with error={error}: {description}")
        self.error = error
        self.description = description
        self.state = state
        self.location = location


# --------------------------------------------------------------------------
# installation
# --------------------------------------------------------------------------


def node_path() -> str | None:
    return shutil.which("node")


def ensure_installed() -> None:
    """Install the provider's npm dependencies if ``node_modules`` is missing.

    Skips the calling test if ``node`` is absent. Runs
    ``npm ci --no-audit --no-fund`` (exactly the lock file) under a file lock,
    so parallel test workers do not install twice.
    """
    if node_path() is None:
        pytest.skip("Node.js (`node`) is not installed: the OIDC test provider cannot run")
    marker = PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json"
    if marker.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ProviderError(
            "`node` is installed but `npm` is not: install npm, or run "
            "`npm ci --no-audit --no-fund --prefix tests/oidc_provider` elsewhere"
        )
    import fcntl

    lock_path = Path(tempfile.gettempdir()) / f"oidc-provider-npm-ci-{os.getuid()}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if marker.exists():
                return
            result = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=PROVIDER_DIR,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if result.returncode != 0 or not marker.exists():
                raise ProviderError(
                    "`npm ci` in tests/oidc_provider failed "
                    f"(exit {result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
                )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --------------------------------------------------------------------------
# signing keys (generated here so tests can also mint tokens with them)
# --------------------------------------------------------------------------


def generate_signing_jwk(alg: str = "RS256", kid: str | None = None) -> dict:
    """A fresh PRIVATE JWK (dict) for ``alg`` (RS256/PS256 -> RSA 2048, ES256 -> P-256)."""
    if alg in ("RS256", "PS256"):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(key, as_dict=True)
    elif alg == "ES256":
        key = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(key, as_dict=True)
    else:
        raise ValueError(f"unsupported test signing alg {alg}")
    jwk.update({"kid": kid or secrets.token_hex(8), "use": "sig", "alg": alg})
    return jwk


def public_jwk(jwk: dict) -> dict:
    private_members = {"d", "p", "q", "dp", "dq", "qi", "oth"}
    return {k: v for k, v in jwk.items() if k not in private_members}


# --------------------------------------------------------------------------
# the provider process
# --------------------------------------------------------------------------


@dataclass
class Provider:
    """A running oidc-provider process. Call ``stop()`` (or use ``with``)."""

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    redirect_uri: str
    accounts: dict[str, dict]
    signing_keys: list[dict] = field(repr=False)  # private JWKs the provider signs with
    token_endpoint_auth_method: str
    process: subprocess.Popen = field(repr=False)
    log_path: Path = field(repr=False)

    @property
    def signing_key(self) -> dict:
        """The provider's (first) private signing JWK, for minting test tokens."""
        return self.signing_keys[0]

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        _terminate(self.process)
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def __enter__(self) -> Provider:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def start_provider(
    redirect_uri: str,
    accounts: dict[str, dict] | None = None,
    *,
    client_id: str | None = None,
    client_secret: str | None = None,
    id_token_alg: str = "RS256",
    token_endpoint_auth_method: str = "client_secret_basic",
    id_token_claims: bool = False,
    id_token_ttl: int = 3600,
) -> Provider:
    """Start oidc-provider on a free 127.0.0.1 port and wait until it serves discovery.

    ``accounts`` maps a login name (the account id, also the ``sub`` unless the
    claims set ``sub``) to its claims; an unknown login is refused. An account
    with a ``"password"`` member (never served as a claim) also needs that
    password; without one any password works. The default has ``alice``
    (verified email) and ``mallory`` (unverified email).

    ``id_token_claims=False`` is the spec's default behaviour: the ID token of
    the code flow carries only protocol claims and ``email`` etc. come from
    the userinfo endpoint. ``True`` also puts them in the ID token.
    """
    ensure_installed()
    accounts = DEFAULT_ACCOUNTS if accounts is None else accounts
    client_id = client_id or f"client-{secrets.token_hex(4)}"
    client_secret = client_secret or secrets.token_urlsafe(32)
    signing_key = generate_signing_jwk(id_token_alg)

    env = dict(os.environ)
    env.update(
        {
            "OIDC_PORT": "0",
            "OIDC_CLIENT_ID": client_id,
            "OIDC_CLIENT_SECRET": client_secret,
            "OIDC_REDIRECT_URI": redirect_uri,
            "OIDC_ACCOUNTS": json.dumps(accounts),
            "OIDC_JWKS": json.dumps({"keys": [signing_key]}),
            "OIDC_ID_TOKEN_ALG": id_token_alg,
            "OIDC_TOKEN_AUTH_METHOD": token_endpoint_auth_method,
            "OIDC_CONFORM_ID_TOKEN_CLAIMS": "false" if id_token_claims else "true",
            "OIDC_ID_TOKEN_TTL": str(id_token_ttl),
            "NODE_ENV": "test",
        }
    )
    fd, log_name = tempfile.mkstemp(prefix="oidc-provider-", suffix=".log")
    log_path = Path(log_name)
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            [node_path(), "server.js"],
            cwd=PROVIDER_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    # Safety net: never leave the process behind, even if a test forgets stop().
    weakref.finalize(process, _terminate, process)

    try:
        issuer = _wait_ready(process, log_path)
    except BaseException:
        _terminate(process)
        with contextlib.suppress(OSError):
            log_path.unlink()
        raise
    return Provider(
        issuer=issuer,
        client_id=client_id,
        client_secret=client_secret,
        redirect_uri=redirect_uri,
        accounts=accounts,
        signing_keys=[signing_key],
        token_endpoint_auth_method=token_endpoint_auth_method,
        process=process,
        log_path=log_path,
    )


def _wait_ready(process: subprocess.Popen, log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    issuer = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ProviderError(
                f"the OIDC test provider exited with {process.returncode}:\n"
                + log_path.read_text(errors="replace")[-4000:]
            )
        if issuer is None:
            match = re.search(
                rf"^{READY_PREFIX}(\S+)$", log_path.read_text(errors="replace"), re.M
            )
            if match:
                issuer = match.group(1)
        if issuer is not None:
            try:
                response = requests.get(
                    f"{issuer}/.well-known/openid-configuration", timeout=2
                )
                if response.status_code == 200 and response.json().get("issuer") == issuer:
                    return issuer
            except (requests.RequestException, ValueError):
                pass
        time.sleep(0.05)
    raise ProviderError(
        f"the OIDC test provider did not answer within {START_TIMEOUT}s:\n"
        + log_path.read_text(errors="replace")[-4000:]
    )


# --------------------------------------------------------------------------
# driving a login like a browser would
# --------------------------------------------------------------------------


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append(
                {"action": attrs.get("action", ""), "method": (attrs.get("method") or "get").lower(), "fields": {}}
            )
        elif tag in ("input", "button") and self.forms and attrs.get("name"):
            if tag == "input" and attrs.get("type") in ("checkbox", "radio") and "checked" not in attrs:
                return
            self.forms[-1]["fields"].setdefault(attrs["name"], attrs.get("value") or "")


def _first_form(html: str) -> dict:
    parser = _FormParser()
    parser.feed(html)
    forms = [f for f in parser.forms if f["method"] == "post"]
    if not forms:
        raise ProviderError(f"expected a form on the provider page, got:\n{html[:2000]}")
    return forms[0]


def drive_login(
    authorization_url: str,
    login: str = "alice",
    password: str = "any-password",
    *,
    max_steps: int = 10,
) -> tuple[str, str]:
    """Follow ``authorization_url`` through the provider's login and consent pages.

    Posts ``login``/``password`` to the login form, then accepts the consent
    form. Returns ``(code, state)`` from the redirect to the client's
    redirect_uri (which is never requested). Raises
    ``AuthorizationErrorRedirect`` if the provider redirects back with an
    ``error`` (unknown account, wrong password), ``ProviderError`` if the flow
    does not reach the redirect_uri.
    """
    with requests.Session() as browser:
        query = parse_qs(urlsplit(authorization_url).query)
        if "redirect_uri" not in query:
            raise ProviderError("the authorization URL has no redirect_uri parameter")
        redirect_host = urlsplit(query["redirect_uri"][0])
        url = authorization_url
        response = browser.get(url, allow_redirects=False, timeout=HTTP_TIMEOUT)
        for _ in range(max_steps):
            if response.is_redirect:
                location = urljoin(response.url, response.headers["Location"])
                parts = urlsplit(location)
                if (parts.scheme, parts.netloc, parts.path) == (
                    redirect_host.scheme,
                    redirect_host.netloc,
                    redirect_host.path,
                ):
                    params = parse_qs(parts.query)
                    if "error" in params:
                        raise AuthorizationErrorRedirect(
                            params["error"][0],
                            params.get("error_description", [""])[0],
                            params.get("state", [None])[0],
                            location,
                        )
                    if "code" not in params:
                        raise ProviderError(f"no code in the redirect back: {location}")
                    return params["code"][0], params.get("state", [""])[0]
                response = browser.get(location, allow_redirects=False, timeout=HTTP_TIMEOUT)
                continue
            if response.status_code != 200:
                raise ProviderError(
                    f"provider answered {response.status_code} at {response.url}:\n{response.text[:2000]}"
                )
            form = _first_form(response.text)
            data = dict(form["fields"])
            if data.get("prompt") == "login" or "login" in data:
                data["login"] = login
                data["password"] = password
            response = browser.post(
                urljoin(response.url, form["action"]),
                data=data,
                allow_redirects=False,
                timeout=HTTP_TIMEOUT,
            )
        raise ProviderError(f"login did not reach the redirect_uri within {max_steps} steps")
