"""The first visit of a new installation: no user yet, so the console opens the set-up of the
first instance admin with the admin API key (typed once, never stored). Named to run first
in tests/browser (the session's database starts empty); skipped when users exist already."""
from __future__ import annotations

import pytest

from tests.conftest import TEST_ADMIN_KEY
from tests.support import Api, unique
from tests.browser.conftest import PASSWORD


def test_first_run_creates_the_instance_admin_and_signs_in(console, api):
    if not Api.data(api.get("/api/v2/auth/options"))["options"]["first_run"]:
        pytest.skip("users exist already in this test session's database")
    page = console.open("/")
    # Not signed in and no one could sign in: the first visit lands on the set-up.
    page.get_by_role("heading", name="Set up this installation").wait_for()
    assert page.url == console.base_url + "/first-run"
    console.shot("first-run")
    page.get_by_label("Admin API key").fill("not-the-key")
    page.get_by_label("Your email address").fill(f"{unique('root')}@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create administrator").click()
    # The wrong key: the error is shown next to the key field, nothing is created.
    page.locator(".field-error", has_text="admin").wait_for()
    assert Api.data(api.get("/api/v2/auth/options"))["options"]["first_run"] is True

    page.get_by_label("Admin API key").fill(TEST_ADMIN_KEY)
    page.get_by_role("button", name="Create administrator").click()
    page.get_by_role("heading", name="Organizations", level=1).wait_for()
    # An instance admin: the administration pages are offered.
    assert page.get_by_role("link", name="Administration").is_visible()
    # The key was used once and is kept nowhere in the page's storage.
    storage = page.evaluate("JSON.stringify(Object.assign({}, sessionStorage, localStorage))")
    assert TEST_ADMIN_KEY not in storage
    assert Api.data(api.get("/api/v2/auth/options"))["options"]["first_run"] is False
