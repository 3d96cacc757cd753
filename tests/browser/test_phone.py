"""The console on a phone (Chromium at 390x844, touch): every page is one column, no page
scrolls sideways (``document.documentElement.scrollWidth <= innerWidth``), and the section
navigation sits behind the Menu button. Screenshots: var/screenshots/phone-*.png."""
from __future__ import annotations

import pytest

from tests.browser.conftest import Console, make_user
from tests.support.browser import every_page
from tests.receivers import Receiver

WIDTH = 390
PHONE = {"viewport": {"width": WIDTH, "height": 844}, "device_scale_factor": 2,
         "is_mobile": True, "has_touch": True}


@pytest.fixture
def phone(browser, stack):
    p = Console(browser, stack.base_url, **PHONE)
    yield p
    errors = list(p.errors)
    p.close()
    assert not errors, "JavaScript errors in the console:\n" + "\n".join(errors)


def _fits(page) -> tuple[int, int]:
    """(the page's scroll width, the window's inner width). On a mobile viewport Chromium
    widens the layout viewport to content that overflows (innerWidth grows past 390 and
    the page zooms out), so the caller checks both against the screen's width."""
    return page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")


def test_no_page_scrolls_sideways_on_a_phone(phone, api, stack, mx):
    page = phone.page
    make_user(api)  # set up already: /sign-in is the sign-in page, not the first run's
    for path, name in (("/sign-in", "Sign in"), ("/first-run", "Set up this installation"),
                       ("/forgot-password", "Forgot your password?")):
        page.goto(phone.base_url + path)
        page.get_by_role("heading", name=name, level=1).wait_for()
        width, inner = _fits(page)
        assert width <= inner == WIDTH, (path, width, inner)
    with Receiver([200] * 20) as rx:
        facts, admin, pages = every_page(api, stack, mx, rx)
        phone.sign_in(admin["email_address"])
        for name, path in pages.items():
            page.goto(phone.base_url + path)
            page.locator("main h1").wait_for()
            if name == "template":
                page.frame_locator(".mail-frame iframe:not([hidden])").locator("b").wait_for()
            page.wait_for_load_state("networkidle")
            width, inner = _fits(page)
            phone.shot(f"phone-{name}")
            assert width <= inner == WIDTH, (name, width, inner)
            assert page.locator("#side").is_hidden(), name  # behind the menu


def test_the_navigation_opens_from_the_menu_button(phone, api, stack, mx):
    with Receiver([200] * 20) as rx:
        facts, admin, _ = every_page(api, stack, mx, rx)
    page = phone.sign_in(admin["email_address"])
    page.goto(phone.base_url + facts["srv"])
    page.locator("main h1").wait_for()
    menu = page.get_by_role("button", name="Menu")
    assert menu.get_attribute("aria-expanded") == "false"
    nav = page.locator("#side")
    assert nav.is_hidden()
    # One column: the main content is as wide as the screen, not beside a navigation.
    box = page.locator("main").bounding_box()
    assert box["x"] == 0 and box["width"] == WIDTH
    menu.click()
    assert menu.get_attribute("aria-expanded") == "true"
    nav.get_by_role("link", name="Webhooks").wait_for()
    phone.shot("phone-menu-open", full_page=False)
    width, inner = _fits(page)
    assert width <= inner == WIDTH
    nav.get_by_role("link", name="Webhooks").click()
    page.get_by_role("heading", name="Webhooks", level=1).wait_for()
    assert nav.is_hidden() and menu.get_attribute("aria-expanded") == "false"
    # At a desktop width the navigation is beside the page and there is no menu button.
    page.set_viewport_size({"width": 1366, "height": 768})
    assert nav.is_visible() and menu.is_hidden()
