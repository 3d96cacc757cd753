"""Single sign-on over HTTP against a real OpenID Connect provider (panva/oidc-provider, a Node
process on loopback): start, the provider's login and consent pages, callback, linking."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from chalicelib.services.accounts import oidc
from tests import oidc_support
from tests.support.accounts import ADMIN, AUTH, PASSWORD, events
from tests.support import Api

CALLBACK = f"{AUTH}/oidc/callback"
JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def provider(stack):
    p = oidc_support.start_provider(stack.base_url + CALLBACK)
    yield p
    p.stop()


@pytest.fixture
def sso_on(provider, monkeypatch):
    monkeypatch.setenv("AUTH_OIDC_ENABLED", "true")
    monkeypatch.setenv("AUTH_OIDC_ISSUER", provider.issuer)
    monkeypatch.setenv("AUTH_OIDC_CLIENT_ID", provider.client_id)
    monkeypatch.setenv("AUTH_OIDC_CLIENT_SECRET", provider.client_secret)
    monkeypatch.setenv("AUTH_OIDC_REDIRECT_URI", provider.redirect_uri)
    oidc.clear_caches()
    yield provider
    oidc.clear_caches()


def begin(api) -> str:
    return Api.data(api.get(f"{AUTH}/oidc/start", headers=JSON))["authorization_url"]


def callback(api, code: str, state: str, headers=JSON):
    return api.get(f"{CALLBACK}?code={code}&state={state}", headers=headers,
                   allow_redirects=False)


def test_sso_is_off_by_default(api):
    Api.error(api.get(f"{AUTH}/oidc/start", allow_redirects=False), 404, "SSODisabled")


def test_round_trip_creates_then_signs_in_the_same_account(api, sso_on):
    start = api.get(f"{AUTH}/oidc/start", allow_redirects=False)
    assert start.status_code == 307
    location = start.headers["Location"]
    assert location.startswith(sso_on.issuer)
    query = parse_qs(urlsplit(location).query)
    assert query["code_challenge_method"] == ["S256"] and query["redirect_uri"] == [
        sso_on.redirect_uri]

    code, state = oidc_support.drive_login(location, login="alice")
    session = Api.data(callback(api, code, state), 201)
    assert session["user"]["email_address"] == "alice@example.com"
    assert session["user"]["sso_linked"] is True and session["user"]["has_password"] is False
    me = Api.data(api.get(f"{AUTH}/me", bearer=session["session_token"]))["user"]
    assert me["first_name"] == "Alice" and me["last_name"] == "Example"

    # The state is good once: replaying the callback fails.
    Api.error(callback(api, code, state), 422, "SSOError")
    Api.error(callback(api, code, "forged-state"), 422, "SSOError")

    again_code, again_state = oidc_support.drive_login(begin(api), login="alice")
    again = Api.data(callback(api, again_code, again_state), 201)
    assert again["user"]["id"] == session["user"]["id"]
    names = [e["event"] for e in events(api, user_id=session["user"]["id"])]
    assert names[:3] == ["sso_login", "sso_login", "sso_account_created"]


def test_an_unverified_email_is_neither_linked_nor_created(api, sso_on):
    code, state = oidc_support.drive_login(begin(api), login="mallory")
    err = Api.error(callback(api, code, state), 422, "SSOError")
    assert "verified" in err["message"]
    failed = events(api, event="sso_failed", limit=1)[0]
    assert failed["success"] is False and failed["ip_address"] == "127.0.0.1"


def test_an_existing_account_is_linked_by_verified_email(api, provider, monkeypatch):
    email = "bob@example.com"
    accounts = {"bob": {"email": email, "email_verified": True, "name": "Bob"}}
    with oidc_support.start_provider(provider.redirect_uri, accounts) as bob_provider:
        for name, value in (("ENABLED", "true"), ("ISSUER", bob_provider.issuer),
                            ("CLIENT_ID", bob_provider.client_id),
                            ("CLIENT_SECRET", bob_provider.client_secret),
                            ("REDIRECT_URI", bob_provider.redirect_uri)):
            monkeypatch.setenv(f"AUTH_OIDC_{name}", value)
        user = Api.data(api.post(f"{ADMIN}/users", {"email_address": email, "password": PASSWORD}),
                        201)["user"]
        code, state = oidc_support.drive_login(begin(api), login="bob")
        session = Api.data(callback(api, code, state), 201)
        assert session["user"]["id"] == user["id"] and session["user"]["sso_linked"] is True
        assert events(api, user_id=user["id"], limit=2)[1]["event"] == "sso_linked"


def test_browser_callback_redirects_to_the_frontend_with_the_token_in_the_fragment(api, sso_on,
                                                                                    monkeypatch):
    monkeypatch.setenv("AUTH_FRONTEND_URL", "https://app.example.test/sso")
    code, state = oidc_support.drive_login(begin(api), login="alice")
    response = callback(api, code, state, headers={"Accept": "text/html"})
    assert response.status_code == 307
    target = urlsplit(response.headers["Location"])
    assert (target.scheme, target.netloc, target.path) == ("https", "app.example.test", "/sso")
    fragment = parse_qs(target.fragment)
    token = fragment["session_token"][0]
    assert fragment["expires_at"][0].endswith("Z")
    assert Api.data(api.get(f"{AUTH}/me", bearer=token))["user"]["email_address"] == "alice@example.com"

    # A failure goes back to the frontend too, with the error code instead of a token.
    failed = callback(api, code, state, headers={"Accept": "text/html"})
    assert failed.status_code == 307
    assert parse_qs(urlsplit(failed.headers["Location"]).fragment)["error"] == ["SSOError"]


def test_provider_refusal_is_an_sso_error(api, sso_on):
    start = begin(api)
    state = parse_qs(urlsplit(start).query)["state"][0]
    response = api.get(f"{CALLBACK}?error=access_denied&error_description=nope&state={state}",
                       headers=JSON)
    err = Api.error(response, 422, "SSOError")
    assert "access_denied" in err["message"]
    # The refused attempt used its state up.
    Api.error(api.get(f"{CALLBACK}?code=x&state={state}", headers=JSON), 422, "SSOError")
