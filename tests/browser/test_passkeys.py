"""Passkeys in a real browser: Chromium's virtual authenticator (the DevTools protocol's
WebAuthn domain: a platform authenticator with user verification) makes a passkey on the
account page; the person then signs in with it alone, and with it as the second factor after
the password; then removes it. The console is opened at http://localhost:<port>: browsers
refuse an IP address as a relying-party id."""
from __future__ import annotations

from tests.browser.conftest import PASSWORD, Console, make_user
from tests.support import Api


def test_passkey_registered_on_the_account_page_then_signs_in(browser, stack, api, monkeypatch):
    base = stack.base_url.replace("127.0.0.1", "localhost")
    monkeypatch.setenv("WEBAUTHN_RP_ID", "localhost")
    monkeypatch.setenv("WEBAUTHN_ORIGINS", base)
    console = Console(browser, base)
    try:
        page = console.page
        cdp = console.context.new_cdp_session(page)
        cdp.send("WebAuthn.enable")
        authenticator = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
            "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
            "hasUserVerification": True, "isUserVerified": True,
            "automaticPresenceSimulation": True}})["authenticatorId"]
        user = make_user(api)
        console.sign_in(user["email_address"])
        page.get_by_role("link", name="Ada Lovelace").click()
        page.get_by_role("heading", name="Passkeys").wait_for()
        page.get_by_text("No passkeys yet.").wait_for()
        page.get_by_label("Name for the new passkey").fill("Work laptop")
        page.get_by_label("Password, to confirm").fill(PASSWORD)
        page.get_by_role("button", name="Add a passkey").click()
        page.get_by_role("cell", name="Work laptop").wait_for()
        console.shot("account-passkeys")
        [held] = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]
        assert held["isResidentCredential"] and held["rpId"] == "localhost"

        # Signed out, the passkey alone signs in (no address, no password).
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("heading", name="Sign in", level=1).wait_for()
        console.shot("sign-in-passkey")
        page.get_by_role("button", name="Use a passkey").click()
        page.get_by_role("heading", name="Organizations", level=1).wait_for()

        # The password alone is no longer enough: the passkey is asked for after it.
        page.get_by_role("button", name="Sign out").click()
        page.get_by_label("Email address").fill(user["email_address"])
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("button", name="Use your passkey").wait_for()
        console.shot("sign-in-passkey-second-factor")
        page.get_by_role("button", name="Use your passkey").click()
        page.get_by_role("heading", name="Organizations", level=1).wait_for()
        events = Api.data(api.get(f"/api/v2/admin/auth_events?user_id={user['id']}&event=login"))
        details = [e["details"] for e in events["auth_events"]]
        assert details[0].startswith("password and passkey") and details[1].startswith("passkey ")

        # Removed (with the password), it signs no one in, and the password alone works.
        page.get_by_role("link", name="Ada Lovelace").click()
        page.get_by_role("button", name="Remove").click()
        page.locator("td form").get_by_label("Password, to confirm").fill(PASSWORD)
        page.get_by_role("button", name="Remove “Work laptop”").click()
        page.get_by_text("No passkeys yet.").wait_for()
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("button", name="Use a passkey").click()
        page.locator(".inline-error", has_text="passkey could not be verified").wait_for()
        console.sign_in(user["email_address"])
        assert not console.errors, console.errors
    finally:
        console.close()
