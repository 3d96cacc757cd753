"""Mail frames through the running stack: POST /server/mail_frames issues a short-lived URL
for a caller of the server (API key, or a signed-in user of any role with X-Server), and
GET /mail-frames/{token} serves the HTML with a policy of its own. How a browser applies
that policy is tested in tests/browser/test_mail_frame.py."""
from __future__ import annotations

from datetime import timedelta

import requests

from chalicelib import clock
from chalicelib.api.public.mail_frames import CONTENT_SECURITY_POLICY
from chalicelib.services.mailframes import frames
from tests.support.accounts import make_user
from tests.support import Api, all_tenants, make_tenant

STYLED = "<style>.x{color:rgb(1,2,3)}</style><p class='x' style='font-weight:700'>Hi {{ name }}</p>"


def _template(api, tenant, **parts) -> str:
    body = {"name": "Styled", "subject": "Hi {{ name }}", "html_body": STYLED,
            "text_body": "Hi {{ name }}", **parts}
    return Api.data(api.post("/api/v2/server/templates", body, server_key=tenant.api_key),
                    201)["template"]["permalink"]


def _issue(api, tenant, body, **credential):
    return api.post("/api/v2/server/mail_frames", body, **(credential or {"server_key": tenant.api_key}))


def test_a_template_frame_serves_its_rendered_html_with_a_policy_of_its_own(api, stack):
    tenant = make_tenant(api)
    permalink = _template(api, tenant)
    frame = Api.data(_issue(api, tenant, {"kind": "template", "id": permalink,
                                          "parts": {"template_model": {"name": "Ada"}}}),
                     201)["mail_frame"]
    assert frame["kind"] == "template" and frame["id"] == permalink
    assert frame["url"] == stack.base_url + frame["path"]
    assert frame["path"].startswith(frames.PATH_PREFIX)
    served = requests.get(frame["url"], timeout=30)
    assert served.status_code == 200
    assert served.text == STYLED.replace("{{ name }}", "Ada")
    assert served.headers["Content-Type"] == "text/html; charset=utf-8"
    assert served.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "sandbox" in CONTENT_SECURITY_POLICY.split("; ")
    assert "script-src" not in CONTENT_SECURITY_POLICY
    assert served.headers["X-Content-Type-Options"] == "nosniff"
    assert served.headers["Referrer-Policy"] == "no-referrer"
    assert served.headers["Cache-Control"] == "no-store"


def test_unsaved_parts_are_shown_and_nothing_is_saved(api):
    tenant = make_tenant(api)
    permalink = _template(api, tenant)
    frame = Api.data(_issue(api, tenant, {"kind": "template", "id": permalink, "parts": {
        "html_body": "<h1 style='color:red'>Draft for {{ name }}</h1>",
        "template_model": {"name": "Bo"}}}), 201)["mail_frame"]
    assert requests.get(frame["url"], timeout=30).text == "<h1 style='color:red'>Draft for Bo</h1>"
    saved = Api.data(api.get(f"/api/v2/server/templates/{permalink}",
                             server_key=tenant.api_key))["template"]
    assert saved["html_body"] == STYLED


def test_a_viewer_may_ask_for_a_frame_and_another_server_may_not(api):
    tenant = make_tenant(api)
    other = make_tenant(api)
    permalink = _template(api, tenant)
    viewer = make_user(api)
    Api.data(api.post(f"/api/v2/admin/organizations/{tenant.org}/members",
                      {"user_id": viewer.id, "role": "viewer"}), 201)
    token = viewer.token
    headers = {"X-Server": f"{tenant.org}/{tenant.server}"}
    body = {"kind": "template", "id": permalink}
    frame = Api.data(api.post("/api/v2/server/mail_frames", body, bearer=token,
                              headers=headers), 201)["mail_frame"]
    assert requests.get(frame["url"], timeout=30).status_code == 200
    # The render preview too is a read for a viewer (it changes nothing).
    rendered = Api.data(api.post(f"/api/v2/server/templates/{permalink}/render",
                                 {"template_model": {"name": "V"}}, bearer=token,
                                 headers=headers))
    assert rendered["subject"] == "Hi V"
    # Writes still need a member.
    Api.error(api.post("/api/v2/server/templates", {"name": "No", "text_body": "x"},
                       bearer=token, headers=headers), 403, "Forbidden")
    # Another server's key does not find this server's template.
    Api.error(_issue(api, other, body), 404, "NotFound")


def test_refusals_name_the_field(api):
    tenant = make_tenant(api)
    permalink = _template(api, tenant)
    err = Api.error(_issue(api, tenant, {"kind": "nothing", "id": permalink}), 422,
                    "ValidationError")
    assert err["field"] == "kind" and "template" in err["message"]
    err = Api.error(_issue(api, tenant, {"kind": "template"}), 400, "ParameterMissing")
    assert err["field"] == "id"
    err = Api.error(_issue(api, tenant, {"kind": "template", "id": permalink,
                                         "parts": {"html_body": "{{#open}}"}}),
                    422, "ValidationError")
    assert err["field"] == "parts.html_body" and err["message"].startswith("parts.html_body: line 1")
    err = Api.error(_issue(api, tenant, {"kind": "template", "id": permalink,
                                         "parts": {"template_model": [1]}}),
                    422, "ValidationError")
    assert err["field"] == "parts.template_model"
    err = Api.error(_issue(api, tenant, {"kind": "template", "id": permalink,
                                         "parts": {"subject": 5}}), 422, "ValidationError")
    assert err["field"] == "parts.subject"
    text_only = _template(api, tenant, name="Plain", html_body=None)
    err = Api.error(_issue(api, tenant, {"kind": "template", "id": text_only}), 422,
                    "ValidationError")
    assert err["field"] == "parts.html_body" and "no HTML part" in err["message"]
    Api.error(_issue(api, tenant, {"kind": "template", "id": "no-such-template"}), 404,
              "NotFound")
    Api.error(api.post("/api/v2/server/mail_frames", {"kind": "template", "id": permalink}),
              401, "Unauthorized")


def test_an_altered_or_expired_url_is_not_served(api, stack):
    tenant = make_tenant(api)
    permalink = _template(api, tenant)
    frame = Api.data(_issue(api, tenant, {"kind": "template", "id": permalink}),
                     201)["mail_frame"]
    frame_id, signature = frame["path"][len(frames.PATH_PREFIX):].split(".")
    for token in (f"{int(frame_id) + 1}.{signature}", f"{frame_id}.{'A' * 22}", "x", frame_id):
        answer = requests.get(f"{stack.base_url}{frames.PATH_PREFIX}{token}", timeout=30)
        assert answer.status_code == 404 and "expired" in answer.text, token
        assert answer.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    clock.advance(frames.TTL + timedelta(seconds=1))
    answer = requests.get(frame["url"], timeout=30)
    assert answer.status_code == 404 and "expired" in answer.text
    # The next frame issued deletes the expired ones.
    Api.data(_issue(api, tenant, {"kind": "template", "id": permalink}), 201)
    from chalicelib.db.models import MailFrame

    with all_tenants() as db:
        assert db.get(MailFrame, int(frame_id)) is None
