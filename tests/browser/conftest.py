"""Browser tests: Debian's Chromium driven by Playwright for Python, against the in-process
local stack on real sockets (the ``stack`` fixture). No browser is downloaded: the tests use
/usr/bin/chromium (CHROMIUM to override) and skip when it is missing. Every page records
console errors and uncaught exceptions; a test fails if any happened. Screenshots of the
main pages go to var/screenshots/ (git-ignored) for a person to look at."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.support import Api, unique

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "var", "screenshots")
PASSWORD = "a long enough password"


def pytest_collection_modifyitems(items):
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield chromium
        chromium.close()


class Console:
    """One browser context (its own sessionStorage) on the console, collecting JS errors."""

    def __init__(self, browser, base_url: str, **context_options):
        """``context_options``: Playwright's new_context() options (default: a 1366x768
        desktop window)."""
        self.base_url = base_url
        self.context = browser.new_context(**(context_options or {
            "viewport": {"width": 1366, "height": 768}}))
        self.context.set_default_timeout(15000)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.blocked_scripts: list[str] = []
        self.page.on("pageerror", self._page_error)
        self.page.on("console", self._console_message)

    def _console_message(self, msg) -> None:
        if msg.type != "error":
            return
        # The browser logs every 4xx answer; API errors the page handles (a wrong password,
        # a 422 shown next to its field) are expected. A missing asset or a 5xx is not.
        url = (msg.location or {}).get("url", "")
        if not self._ours(url or self.page.url):
            return  # another site's page (the SSO provider's login form)
        if "Failed to load resource" in msg.text and "/api/v2/" in url and \
                "status of 4" in msg.text:
            return
        if "/mail-frames/" in url and msg.text.startswith("Blocked script execution"):
            # A mail's script refused by its sandboxed frame (mailframe.js): what should happen.
            self.blocked_scripts.append(url)
            return
        self.errors.append(f"console: {msg.text} at {url}")

    def _ours(self, url: str) -> bool:
        return url.startswith(self.base_url + "/") or url == self.base_url

    def _page_error(self, exc) -> None:
        if self._ours(self.page.url):
            self.errors.append(f"pageerror: {exc}")

    def open(self, path: str):
        self.page.goto(self.base_url + path)
        return self.page

    def shot(self, name: str, full_page: bool = True) -> str:
        """``full_page``: the whole page, except what sandboxed frames show (Chromium leaves
        them blank in a full-page capture); False: the viewport as it is, frames included."""
        os.makedirs(SCREENSHOTS, exist_ok=True)
        path = os.path.join(SCREENSHOTS, f"{name}.png")
        self.page.screenshot(path=path, full_page=full_page)
        return path

    def sign_in(self, email: str, password: str = PASSWORD, next_heading: str | None = None):
        page = self.open("/sign-in")
        page.get_by_label("Email address").fill(email)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name=next_heading or "Organizations", level=1).wait_for()
        return page

    def close(self):
        self.context.close()


@pytest.fixture
def console(browser, stack):
    c = Console(browser, stack.base_url)
    yield c
    errors = list(c.errors)
    c.close()
    assert not errors, "JavaScript errors in the console:\n" + "\n".join(errors)


def make_user(api: Api, *, admin: bool = False, email: str | None = None) -> dict:
    email = email or f"{unique('user')}@example.com"
    user = Api.data(api.post("/api/v2/admin/users", {
        "email_address": email, "first_name": "Ada", "last_name": "Lovelace",
        "password": PASSWORD, "admin": admin}), 201)["user"]
    return {**user, "password": PASSWORD}
