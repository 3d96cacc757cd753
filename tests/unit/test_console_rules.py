"""The console's rules module (/assets/generated/rules.js, chalicelib/console_rules.py) says
what the service enforces: the permission matrix of services/permissions.py and the status
vocabularies the API documents."""
from __future__ import annotations

import json
import os
import re

import pytest

from chalicelib import console, console_rules
from chalicelib.services import permissions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT = re.compile(r"^export const (\w+) = Object\.freeze\((.*?)\);$", re.M | re.S)


def _exports(text: str) -> dict[str, object]:
    """The module's exports, read back from its text (each one a JSON literal)."""
    return {name: json.loads(literal) for name, literal in EXPORT.findall(text)}


@pytest.fixture(scope="module")
def served():
    """The module as the console route answers it (the same view runs on Lambda and locally)."""
    from chalicelib.api import console as console_api

    response = console_api.asset2(*console_rules.SEGMENTS)
    assert response.status_code == 200
    return response


def _status_enum(path: str) -> list[str]:
    with open(os.path.join(ROOT, "openapi.json"), encoding="utf-8") as fh:
        document = json.load(fh)
    status = next(p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "status")
    return status["schema"]["enum"]


def test_the_module_is_served_as_javascript_with_the_consoles_headers(served):
    assert served.headers == console.headers("text/javascript; charset=utf-8")
    assert served.body == console_rules.module()
    # Every line is a comment, blank or one frozen export: nothing else for a page to run.
    for line in served.body.splitlines():
        assert not line.strip() or line.startswith(("//", "export const ", "  ", "})")), line


def test_the_roles_are_the_permission_matrix(served):
    exports = _exports(served.body)
    assert exports["ROLES"] == list(permissions.ROLES)
    assert exports["RANK"] == permissions.RANK
    # Every action, instance-admin-only ones too (null), and nothing the service lacks.
    assert exports["ACTIONS"] == permissions.ACTIONS
    assert set(exports["ACTIONS"].values()) <= set(permissions.ROLES) | {None}


def test_the_statuses_are_the_ones_the_api_documents(served):
    exports = _exports(served.body)
    assert exports == console_rules.tables()  # the text says what the generator meant
    assert exports["MESSAGE_STATUSES"] == _status_enum("/api/v2/server/messages")
    assert exports["INBOUND_STATUSES"] == _status_enum("/api/v2/server/inbound")
    union = list(dict.fromkeys(exports["OUTGOING_STATUSES"] + exports["INCOMING_STATUSES"]))
    assert union == exports["MESSAGE_STATUSES"]
    assert set(exports["RETRYABLE_STATUSES"]) <= set(exports["OUTGOING_STATUSES"])


def test_a_file_of_that_name_cannot_shadow_it(tmp_path, monkeypatch):
    from chalicelib.api import console as console_api

    fake = tmp_path / "assets" / "generated"
    fake.mkdir(parents=True)
    (fake / "rules.js").write_text("export const ROLES = ['everyone'];\n")
    (tmp_path / "index.html").write_text("<!doctype html>")
    monkeypatch.setattr(console, "_CANDIDATES", (str(tmp_path),))
    assert console_api.asset2("generated", "rules.js").body == console_rules.module()

