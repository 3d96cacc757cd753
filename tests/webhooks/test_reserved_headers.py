"""The reserved webhook headers are one rule (``X-Service-*`` and the headers HTTP owns, in
services/webhooks/hooks.py): the validation refuses any of them through the API, a header
the service adds later under ``X-Service-`` is covered without a list to extend, and
docs/api.md states the same rule."""
from __future__ import annotations

import os
import re

from chalicelib.services.webhooks import deliver, hooks
from tests.support import Api

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_reserved_header_is_refused_and_others_are_kept(api, tenant):
    base = tenant.server_path + "/webhooks"
    # X-Service-Signature-Key was missing from the hand-written list this rule replaced.
    names = ["X-Service-Signature-Key", "x-service-event", "X-Service-Not-Yet-Invented",
             *hooks.HTTP_OWNED_HEADERS, "content-length"]
    for name in names:
        err = Api.error(api.post(base, {"url": "http://127.0.0.1:9/",
                                        "headers": {name: "secret-value"}}),
                        422, "ValidationError")
        assert err["field"] == "headers" and name in err["message"], name
        assert "secret-value" not in err["message"]
    kept = Api.data(api.post(base, {"url": "http://127.0.0.1:9/",
                                    "headers": {"X-Services-Tenant": "a", "X-Hostname": "b"}}))
    assert kept["webhook"]["headers"] == {"X-Services-Tenant": "••••••", "X-Hostname": "••••••"}


def test_the_headers_the_service_sends_fall_under_the_rule():
    """Every ``X-Service-…`` name written in the delivery code is reserved by the rule."""
    with open(deliver.__file__, encoding="utf-8") as fh:
        source = fh.read()
    sent = set(re.findall(r'"(X-Service-[A-Za-z-]+)"', source))
    assert {"X-Service-Event", "X-Service-UUID", "X-Service-Signature",
            "X-Service-Signature-Key"} <= sent
    assert all(hooks.reserved_header(name) for name in sent)


def test_docs_state_the_rule():
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as fh:
        text = " ".join(fh.read().split())
    rule = ", ".join(f"`{h}`" for h in (hooks.RESERVED_HEADER_PREFIX + "*",
                                        *hooks.HTTP_OWNED_HEADERS))
    assert f"cannot override the reserved headers: {rule}" in text
