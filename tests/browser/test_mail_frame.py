"""The template preview shows the mail as a mail client would: the styles of its HTML (a
``<style>`` block, a style attribute) apply in the preview frame, read back as computed
styles in Chromium, while its scripts do not run, the frame has an opaque origin, and the
console's own page keeps its policy (no inline style there)."""
from __future__ import annotations

import requests

from tests.browser.conftest import make_user
from tests.support import Api, make_tenant

HTML = ("<style>.x { color: rgb(1, 2, 3); background: rgb(255, 236, 179); }</style>"
        "<p class='x' style='font-weight: 700; padding-left: 17px'>Hello {{ name }}</p>"
        "<script>document.body.dataset.ran = 'script';</script>"
        "<img src='data:,' onerror=\"document.body.dataset.ran = 'handler'\" alt=''>")


def _frame(page, text: str):
    """The preview frame once it shows ``text`` (the one visible iframe of the preview)."""
    visible = ".mail-frame iframe:not([hidden])"
    page.frame_locator(visible).locator("p.x", has_text=text).wait_for()
    return page.locator(visible).element_handle().content_frame()


def test_the_template_preview_applies_the_mails_styles_and_nothing_else(console, api):
    tenant = make_tenant(api)
    member = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"email_address": member["email_address"], "role": "member"}), 201)
    template = Api.data(api.post("/api/v2/server/templates", {
        "name": "Styled", "subject": "Hi {{ name }}", "html_body": HTML,
        "text_body": "Hello {{ name }}"}, server_key=tenant.api_key), 201)["template"]
    console.sign_in(member["email_address"])
    page = console.open(f"/orgs/{tenant.org}/servers/{tenant.server}/templates/"
                        f"{template['permalink']}")
    frame = _frame(page, "Hello Ada")
    styled = frame.locator("p.x")
    assert styled.evaluate("e => getComputedStyle(e).color") == "rgb(1, 2, 3)"
    assert styled.evaluate("e => getComputedStyle(e).fontWeight") == "700"
    assert styled.evaluate("e => getComputedStyle(e).paddingLeft") == "17px"
    # Neither the script nor the event handler ran; the document has an opaque origin.
    assert frame.evaluate("() => document.body.dataset.ran || null") is None
    assert console.blocked_scripts  # Chromium reported refusing them
    assert frame.evaluate("() => self.origin") == "null"
    element = page.locator(".mail-frame iframe:not([hidden])")
    assert element.get_attribute("sandbox") == ""
    assert styled.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(255, 236, 179)"
    element.scroll_into_view_if_needed()
    console.shot("mail-frame-template", full_page=False)  # a full-page capture leaves frames blank

    # Typing follows: unsaved HTML is shown styled, and Back does not step through previews.
    entries = page.evaluate("() => history.length")
    page.get_by_label("HTML body").fill(
        "<style>.x { color: rgb(9, 8, 7); }</style><p class='x'>Draft for {{ name }}</p>")
    frame = _frame(page, "Draft for Ada")
    assert frame.locator("p.x").evaluate("e => getComputedStyle(e).color") == "rgb(9, 8, 7)"
    assert page.locator(".mail-frame iframe").count() == 1
    assert page.evaluate("() => history.length") == entries

    # The console's own page keeps a policy without inline styles.
    csp = requests.get(console.base_url + page.url[len(console.base_url):],
                       headers={"Accept": "text/html"}, timeout=30).headers["Content-Security-Policy"]
    assert "style-src 'self'" in csp and "unsafe-inline" not in csp
