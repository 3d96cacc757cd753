"""Passkeys in a real browser: Chromium's virtual authenticator (the DevTools protocol's
WebAuthn domain: a platform authenticator with user verification) makes a passkey on the
account page; the person then signs in with it alone, and with it as the second factor after
the password; then removes it. Browsers refuse an IP address as a relying-party id, so with
the default settings the stack is addressed as http://localhost:<port> (the banner's address,
PUBLIC_URL's default and the relying party's origin when HOST is a loopback address); the
second test proves it on `make run`'s own process with nothing about passkeys configured."""
from __future__ import annotations

import re

from tests.browser.conftest import PASSWORD, Console, make_user
from tests.support import Api, free_port


def _virtual_authenticator(console: Console):
    cdp = console.context.new_cdp_session(console.page)
    cdp.send("WebAuthn.enable")
    authenticator = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
        "hasUserVerification": True, "isUserVerified": True,
        "automaticPresenceSimulation": True}})["authenticatorId"]
    return cdp, authenticator


def _add_passkey(page, name: str) -> None:
    page.get_by_role("link", name="Ada Lovelace").click()
    page.get_by_role("heading", name="Passkeys").wait_for()
    page.get_by_text("No passkeys yet.").wait_for()
    page.get_by_label("Name for the new passkey").fill(name)
    page.get_by_label("Password, to confirm").fill(PASSWORD)
    page.get_by_role("button", name="Add a passkey").click()
    page.get_by_role("cell", name=name).wait_for()


def test_passkey_registered_on_the_account_page_then_signs_in(browser, stack, api):
    assert stack.base_url.startswith("http://localhost:")  # no WEBAUTHN_* settings here
    console = Console(browser, stack.base_url)
    try:
        page = console.page
        cdp, authenticator = _virtual_authenticator(console)
        user = make_user(api)
        console.sign_in(user["email_address"])
        _add_passkey(page, "Work laptop")
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


def test_a_console_opened_at_the_ip_address_says_where_passkeys_work(browser, stack, api):
    """The stack listens on 127.0.0.1, so the console answers there too; a passkey cannot be
    made there (the relying party is localhost), and the page names the address to open."""
    port = stack.base_url.rsplit(":", 1)[1]
    console = Console(browser, f"http://127.0.0.1:{port}")
    try:
        _virtual_authenticator(console)
        console.sign_in(make_user(api)["email_address"])
        page = console.page
        page.get_by_role("link", name="Ada Lovelace").click()
        page.get_by_label("Name for the new passkey").fill("Here")
        page.get_by_label("Password, to confirm").fill(PASSWORD)
        page.get_by_role("button", name="Add a passkey").click()
        page.get_by_text("Passkeys on this installation belong to localhost, not 127.0.0.1: "
                         f"open the console at http://localhost:{port}/").wait_for()
        assert not console.errors, console.errors
    finally:
        console.close()


def test_passkeys_work_at_the_address_make_runs_banner_prints(browser, tmp_path):
    """`make run`'s process (python -m chalicelib.local, the supervisor and its children)
    with the default settings, only the ports chosen: the console at the address its banner
    prints makes a passkey and signs in with it (it used to be http://127.0.0.1:8000, an IP
    address no browser accepts as the relying-party id)."""
    from tests.processes import Stack, own_database

    defaults = {"PUBLIC_URL": "", "AUTH_FRONTEND_URL": "", "WEBAUTHN_RP_ID": "",
                "WEBAUTHN_ORIGINS": "", "HOST": "127.0.0.1", "PORT": str(free_port()),
                "WORKER_PROCESSES": "1"}
    with own_database(tmp_path, sqlite=True) as (owner, service):
        made = Stack(tmp_path, owner, service, **defaults)
        try:
            banner = "\n".join(made.lines)
            console_url = re.search(r"^console +(\S+)/ ", banner, re.MULTILINE).group(1)
            assert console_url == made.base_url == f"http://localhost:{defaults['PORT']}"
            user = make_user(made.api)
            console = Console(browser, console_url)
            try:
                page = console.page
                cdp, authenticator = _virtual_authenticator(console)
                console.sign_in(user["email_address"])
                _add_passkey(page, "Laptop")
                [held] = cdp.send("WebAuthn.getCredentials",
                                  {"authenticatorId": authenticator})["credentials"]
                assert held["rpId"] == "localhost"
                page.get_by_role("button", name="Sign out").click()
                page.get_by_role("button", name="Use a passkey").click()
                page.get_by_role("heading", name="Organizations", level=1).wait_for()
                assert not console.errors, console.errors
            finally:
                console.close()
        finally:
            made.kill()
