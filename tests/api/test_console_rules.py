"""The console's rules module (/assets/generated/rules.js, chalicelib/console/rules.py) says
what the service enforces: the permission matrix of services/accounts/permissions.py and the status
vocabularies the API documents. And the console's own modules use it, without import circles."""
from __future__ import annotations

import json
import os
import re

import pytest

from chalicelib.console import files as console, rules as console_rules
from chalicelib.services.accounts import permissions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASSETS = os.path.join(ROOT, "console", "assets")
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


# The console's modules, read as text: what they import and which rules they name.
IMPORT = re.compile(r"""(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]""", re.M)


def _modules() -> dict[str, str]:
    found = {}
    for folder, dirs, files in os.walk(ASSETS):
        dirs[:] = [d for d in dirs if d != "vendor"]  # third-party, copied in by make install
        for name in files:
            if name.endswith(".js"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as fh:
                    found[os.path.relpath(path, ASSETS)] = fh.read()
    return found


def test_no_import_circles_among_the_console_modules():
    # Static and dynamic imports both count: a page that imports the module loading it runs
    # against a half-initialised module when it is the first to load.
    modules = _modules()
    graph = {name: [os.path.normpath(os.path.join(os.path.dirname(name), spec))
                    for spec in IMPORT.findall(text) if spec.startswith(".")]
             for name, text in modules.items()}
    assert "generated/rules.js" in {dep for deps in graph.values() for dep in deps}
    circles, state = [], {}

    def visit(name, path):
        state[name] = "open"
        for dep in graph.get(name, []):
            if state.get(dep) == "open":
                circles.append(" -> ".join(path[path.index(dep):] + [name, dep]))
            elif dep not in state:
                visit(dep, path + [name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert circles == []


def test_the_console_names_only_rules_the_service_has():
    exports = console_rules.tables()
    text = "\n".join(_modules().values())
    actions = set(re.findall(r"\bcan\(\s*'([\w.]+)'", text))
    assert actions and actions <= set(exports["ACTIONS"]), actions - set(exports["ACTIONS"])
    for helper, vocabulary in (("messageStatus", "MESSAGE_STATUSES"),
                               ("inboundStatus", "INBOUND_STATUSES")):
        named = set(re.findall(rf"\b{helper}\(\s*'(\w+)'", text))
        assert named <= set(exports[vocabulary]), (helper, named - set(exports[vocabulary]))
    # No hand-kept copy: no table of ranks or actions, no list literal of statuses or roles.
    assert not re.search(r"\bconst (RANK|ACTIONS|ROLES|\w*STATUSES)\s*=", text)
    words = set(exports["ROLES"]) | set(exports["MESSAGE_STATUSES"]) | set(exports["INBOUND_STATUSES"])
    lists = [pair for pair in re.findall(r"'(\w+)'\s*,\s*'(\w+)'", text) if set(pair) <= words]
    assert lists == []
