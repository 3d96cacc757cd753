"""The official Mustache specification vectors (mustache/spec, MIT; re-created in
tests/data/mustache_spec, see its README) through the HTTP surface: each vector is saved as a
template's html_body and rendered by the preview endpoint with its data as template_model.
The renderer itself is tested vector by vector in tests/sending/test_templating.py; this checks
that saving and the JSON round trip change nothing on the way."""
from __future__ import annotations

import json
import pathlib

from tests.support import Api

S = "/api/v2/server"
SPEC_DIR = pathlib.Path(__file__).resolve().parent.parent / "data" / "mustache_spec"


def test_spec_vectors_render_through_the_api(api, tenant):
    checked = 0
    for name in ("comments", "interpolation", "sections", "inverted"):
        for n, case in enumerate(json.loads((SPEC_DIR / f"{name}.json").read_text())["tests"]):
            if not isinstance(case["data"], dict):  # template_model is a JSON object
                continue
            permalink = f"{name}-{n}"
            Api.data(api.post(S + "/templates", {"name": case["name"], "permalink": permalink,
                                                 "html_body": case["template"]},
                              server_key=tenant.api_key), 201)
            rendered = Api.data(api.post(S + f"/templates/{permalink}/render",
                                         {"template_model": case["data"]},
                                         server_key=tenant.api_key))
            assert rendered["html_body"] == case["expected"], (name, case["name"])
            checked += 1
    assert checked == 104  # 110 vectors, 6 with a non-object top-level context
