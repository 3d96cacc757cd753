"""Account flows in a real browser: 2FA enrolment with its QR code and the TOTP step of
sign-in, accepting an invitation and completing a password reset through their links, a
viewer offered no management actions, deep links that survive a reload, and a 401 that
comes back to the page after signing in."""
from __future__ import annotations

import re
from datetime import timedelta

import pyotp

from chalicelib import clock
from tests.browser.conftest import PASSWORD, make_user
from tests.support import Api, make_tenant, unique


def add_member(api: Api, org: str, email: str, role: str) -> None:
    Api.data(api.post(f"/api/v2/admin/organizations/{org}/members",
                      {"email_address": email, "role": role}), 201)


def test_totp_enrolment_with_a_qr_code_then_sign_in_asks_for_the_code(console, api):
    user = make_user(api)
    page = console.sign_in(user["email_address"])
    page.get_by_role("link", name="Ada Lovelace").click()
    page.get_by_role("heading", name="Your account", level=1).wait_for()
    page.get_by_role("button", name="Set up two-factor authentication").click()
    qr = page.get_by_role("img", name="QR code for your authenticator app")
    qr.wait_for()
    assert qr.locator("rect, path").count() > 0  # drawn, not an empty box
    secret = page.locator(".copyable code").inner_text().strip()
    console.shot("account-2fa")
    page.get_by_label("Code from the app").fill("000000" if pyotp.TOTP(secret).at(
        clock.timestamp()) != "000000" else "111111")
    page.get_by_role("button", name="Turn on").click()
    page.locator(".form-error, .field-error", has_text="code").first.wait_for()
    page.get_by_label("Code from the app").fill(pyotp.TOTP(secret).at(clock.timestamp()))
    page.get_by_role("button", name="Turn on").click()
    page.get_by_text("Two-factor authentication is on").wait_for()
    console.shot("account")

    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("heading", name="Sign in", level=1).wait_for()
    clock.advance(timedelta(seconds=30))  # a code is good once per time step
    page.get_by_label("Email address").fill(user["email_address"])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Two-factor authentication").wait_for()
    page.get_by_label("Authentication code").fill("12345x")
    page.get_by_role("button", name="Verify").click()
    page.locator(".form-error, .field-error").first.wait_for()
    page.get_by_label("Authentication code").fill(pyotp.TOTP(secret).at(clock.timestamp()))
    page.get_by_role("button", name="Verify").click()
    page.get_by_role("heading", name="Organizations", level=1).wait_for()


def test_invitation_accepted_through_its_link(console, api):
    tenant = make_tenant(api)
    invitee = f"{unique('new')}@example.com"
    inv = Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/invitations",
                            {"email_address": invitee, "role": "member"}), 201)["invitation"]
    # The link points at the console (AUTH_FRONTEND_URL defaults to it).
    assert inv["url"] == f"{console.base_url}/invitations/{inv['token']}"
    page = console.page
    page.goto(inv["url"])
    page.get_by_role("heading", name="Invitation", level=1).wait_for()
    assert invitee in page.locator("main").inner_text()
    console.shot("invitation")
    page.get_by_label("First name").fill("New")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create account and join").click()
    page.wait_for_url(re.compile(rf"/orgs/{tenant.org}$"))
    page.get_by_role("heading", name="Mail servers").wait_for()
    assert "member" in page.locator(".sub").inner_text()
    # The link is spent.
    page.goto(inv["url"])
    page.locator(".notice.error").wait_for()


def test_password_reset_through_its_link(console, api):
    user = make_user(api)
    issued = Api.data(api.post(f"/api/v2/admin/users/{user['id']}/password_reset"),
                      201)["password_reset"]
    assert issued["reset_url"].startswith(console.base_url + "/password-reset/")
    page = console.page
    page.goto(issued["reset_url"])
    page.get_by_role("heading", name="Choose a new password", level=1).wait_for()
    page.get_by_label("New password").fill("short")
    page.get_by_role("button", name="Set password").click()
    page.locator(".field-error", has_text="New password must be at least").wait_for()
    page.get_by_label("New password").fill("a brand new password")
    page.get_by_role("button", name="Set password").click()
    page.get_by_text("Your password is changed").wait_for()
    # Used once: a second visit says so.
    page.goto(issued["reset_url"])
    page.get_by_label("New password").fill("another new password")
    page.get_by_role("button", name="Set password").click()
    page.locator(".form-error").wait_for()
    console.sign_in(user["email_address"], "a brand new password")


def test_a_viewer_is_offered_no_management_actions(console, api):
    tenant = make_tenant(api)
    viewer = make_user(api)
    add_member(api, tenant.org, viewer["email_address"], "viewer")
    page = console.sign_in(viewer["email_address"])
    base = f"/orgs/{tenant.org}/servers/{tenant.server}"
    page.goto(console.base_url + f"/orgs/{tenant.org}")
    page.get_by_role("heading", name="Mail servers").wait_for()
    assert page.get_by_role("button", name="Create server").count() == 0
    assert page.get_by_role("heading", name="Invitations").count() == 0
    assert page.get_by_role("button", name="Remove").count() == 0
    nav = page.get_by_role("navigation", name="Sections")
    page.goto(console.base_url + base + "/domains")
    page.get_by_role("heading", name="Domains", level=1).wait_for()
    assert page.get_by_role("button", name=re.compile("Add domain|Verify|Delete")).count() == 0
    assert nav.get_by_role("link", name="Credentials").count() == 0
    assert nav.get_by_role("link", name="Webhooks").count() == 0
    for path, forbidden in (("/routes", "Create route"), ("/suppressions", "Suppress"),
                            ("/streams", "Create stream"), ("/templates", "Create template"),
                            ("/settings", "Save settings")):
        page.goto(console.base_url + base + path)
        page.locator("main h1").wait_for()
        assert page.get_by_role("button", name=forbidden).count() == 0, path
    console.shot("viewer-settings")


def test_deep_link_survives_reload_and_a_401_comes_back_after_sign_in(console, api):
    tenant = make_tenant(api)
    admin = make_user(api, admin=True)
    deep = f"/orgs/{tenant.org}/servers/{tenant.server}/domains"
    page = console.open(deep)
    # Not signed in: sign-in first, then back to the deep link.
    page.wait_for_url(re.compile(r"/sign-in\?next="))
    page.get_by_label("Email address").fill(admin["email_address"])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Domains", level=1).wait_for()
    assert page.url.endswith(deep)
    page.reload()
    page.get_by_role("heading", name="Domains", level=1).wait_for()
    assert tenant.domain in page.locator("main").inner_text()
    # The session is revoked elsewhere: the next call answers 401, and the console goes to
    # sign-in and returns to the page afterwards.
    token = page.evaluate("JSON.parse(sessionStorage.getItem('email-service.session')).token")
    Api.data(api.post("/api/v2/auth/logout", bearer=token))
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Routes").click()
    page.wait_for_url(re.compile(r"/sign-in\?next=.*routes"))
    page.get_by_label("Email address").fill(admin["email_address"])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Routes", level=1).wait_for()
    # Unknown /api/ paths keep the JSON envelope even for a browser.
    response = page.request.get(console.base_url + "/api/v2/nope",
                                headers={"Accept": "text/html"})
    assert response.status == 404 and response.json()["error"]["code"] == "NotFound"


def test_single_sign_on_through_a_real_provider_lands_signed_in(console, stack, monkeypatch):
    import pytest

    from chalicelib.services.accounts import oidc
    from tests import oidc_support

    if oidc_support.node_path() is None:
        pytest.skip("Node.js is needed for the test OpenID provider")
    oidc_support.ensure_installed()
    # Its own account: tests/accounts/test_sso.py expects "alice" to be created by its own run.
    accounts = {"ada": {"email": "ada.sso@example.com", "email_verified": True,
                        "name": "Ada Lovelace", "given_name": "Ada", "family_name": "Lovelace"}}
    with oidc_support.start_provider(stack.base_url + "/api/v2/auth/oidc/callback",
                                     accounts) as provider:
        for name, value in (("ENABLED", "true"), ("ISSUER", provider.issuer),
                            ("CLIENT_ID", provider.client_id),
                            ("CLIENT_SECRET", provider.client_secret),
                            ("REDIRECT_URI", provider.redirect_uri)):
            monkeypatch.setenv(f"AUTH_OIDC_{name}", value)
        oidc.clear_caches()
        try:
            page = console.open("/sign-in")
            page.get_by_role("button", name="Sign in with single sign-on").click()
            # The provider's own development login and consent pages.
            page.wait_for_url(re.compile(re.escape(provider.issuer)))
            page.locator("input[name=login]").fill("ada")
            page.locator("input[name=password]").fill("anything")
            page.locator("button[type=submit]").first.click()
            consent = page.locator("button[type=submit]")
            consent.first.wait_for()
            if not page.url.startswith(console.base_url):
                consent.first.click()
            # Back at the console, signed in, with the token gone from the address bar.
            page.get_by_role("heading", name="Organizations", level=1).wait_for()
            assert "session_token" not in page.url
            assert page.get_by_role("link", name=re.compile("Ada")).count() == 1
        finally:
            oidc.clear_caches()


def test_sign_out_the_other_sessions_and_change_the_password(console, api):
    user = make_user(api)
    email = user["email_address"]
    elsewhere = Api.data(api.post("/api/v2/auth/login", {"email_address": email,
                                                       "password": PASSWORD}), 201)
    page = console.sign_in(email)
    page.goto(console.base_url + "/account")
    sessions = page.get_by_role("table", name="Sessions")
    sessions.wait_for()
    assert sessions.get_by_role("row").count() == 3  # header, this browser, elsewhere
    page.get_by_role("button", name="Sign out all other sessions").click()
    page.get_by_role("button", name="Sign out all other sessions").wait_for(state="detached")
    Api.error(api.get("/api/v2/auth/me", bearer=elsewhere["session_token"]), 401, "Unauthorized")

    page.get_by_label("Current password").fill("not my password")
    page.get_by_label("New password").fill("an even longer password")
    page.get_by_role("button", name="Change password").click()
    page.locator(".field-error:visible", has_text="The password is wrong.").wait_for()
    page.get_by_label("Current password").fill(PASSWORD)
    page.get_by_label("New password").fill("an even longer password")
    page.get_by_role("button", name="Change password").click()
    page.get_by_text("Password changed.").wait_for()
    # This tab carries on with the fresh session the answer brought.
    page.reload()
    page.get_by_role("heading", name="Your account", level=1).wait_for()
    Api.data(api.post("/api/v2/auth/login", {"email_address": email,
                                            "password": "an even longer password"}), 201)


def test_change_the_email_address_with_the_password(console, api):
    user = make_user(api)
    new = f"{unique('moved')}@example.com"
    page = console.sign_in(user["email_address"])
    page.goto(console.base_url + "/account")
    page.get_by_label("New email address").fill(new)
    page.get_by_label("Your password").fill("not my password")
    page.get_by_role("button", name="Change email address").click()
    page.locator(".field-error:visible", has_text="the password is wrong").wait_for()
    page.get_by_label("Your password").fill(PASSWORD)
    page.get_by_role("button", name="Change email address").click()
    page.locator("p.sub", has_text=new).wait_for()
    console.shot("account-email-changed")
    Api.data(api.post("/api/v2/auth/login", {"email_address": new, "password": PASSWORD}), 201)
