"""No module uses another module's `_private` names (the house rule, docs/architecture.md).

Read from the source with ast over chalicelib/, tests/, bench/, client/ and app.py: an
``from x import _name`` of a project module, and ``x._name`` where ``x`` is a project module
the file imported. A module's own names, dunders (``__version__``) and third-party modules
are not this rule's business. The exceptions below are the ones found when the rule came in
(issue 36): shrink the list, never grow it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("chalicelib", "tests", "bench", "client", "app")
SOURCES = [ROOT / "app.py", *(p for d in ("chalicelib", "tests", "bench", "client")
                              for p in (ROOT / d).rglob("*.py") if "node_modules" not in p.parts)]

# (file, "module:name") found when the rule came in. The engine's tests reach the two
# functions they measure.
KNOWN = {
    ("tests/db/test_engine_pg8000.py", "chalicelib.db.engine:_create_engine"),
    ("tests/db/test_engine_pg8000.py", "chalicelib.db.engine:_flat_array"),
    # Tests and benchmarks that reach into a module's internals (a cache to clear, a helper
    # to measure, a constant): each wants a public name or a fixture.
    ("bench/bench_pipeline_lambda.py", "chalicelib.db.engine:_autocommit_engines"),
    ("bench/bench_pipeline_lambda.py", "chalicelib.db.engine:_engines"),
    ("bench/bench_templates.py", "chalicelib.services.sending.templating:_cache"),
    ("tests/accounts/test_oidc.py", "chalicelib.services.accounts.oidc:_userinfo"),
    ("tests/api/test_response_shapes.py", "chalicelib.api.openapi:_responses"),
    ("tests/db/test_engine_pg8000.py", "chalicelib.db.engine:_pg8000_is_patchable"),
    ("tests/delivery/test_batch.py", "app:_PREFIX"),
    ("tests/workers/test_queues.py", "app:_PREFIX"),
    ("tests/dkim/test_signer.py", "chalicelib.services.dkim.signer:_load_key"),
    ("tests/dmarc/test_intake.py", "chalicelib.services.dmarc.reports:_relay_cache"),
    ("tests/mime/test_mime.py", "chalicelib.services.mime.checks:_HeaderClasses"),
    ("tests/sending/test_templating.py", "chalicelib.services.sending.templating:_Cache"),
    ("tests/suppressions/test_race.py", "chalicelib.services.suppressions.entries:_insert_imported"),
    ("tests/tracking/test_engagement.py", "chalicelib.services.tracking.engagement:_LINK_TOKEN"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ours(module: str) -> bool:
    return module.split(".")[0] in PROJECT


def private_uses(path: Path, me: str | None = None) -> set[str]:
    """``module:name`` for each private name of another project module this file (the module
    ``me``, by default named from its path) uses."""
    me = me or _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    modules: dict[str, str] = {}  # local name -> project module it is bound to
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name):
                    local = alias.asname or alias.name
                    modules[local] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            if not _ours(source) or source == me:
                continue
            for alias in node.names:
                if _is_private(alias.name):
                    found.add(f"{source}:{alias.name}")
                else:  # may be a module: its private attributes count too
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _is_private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in modules
                and modules[node.value.id] != me):
            found.add(f"{modules[node.value.id]}:{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    uses = {(str(p.relative_to(ROOT)), use) for p in SOURCES for use in private_uses(p)}
    assert uses - KNOWN == set(), "private names used across modules (make them public)"
    assert KNOWN - uses == set(), "fixed: take them off KNOWN"


def test_the_check_sees_both_forms(tmp_path):
    """The rule finds an imported private name and a private attribute of an imported module,
    and leaves a module's own private names and third-party ones alone."""
    probe = tmp_path / "probe.py"
    probe.write_text("from chalicelib.db import engine\n"
                     "from chalicelib.db.engine import _flat_array\n"
                     "from email.contentmanager import _encode_text\n"
                     "import chalicelib.config as config\n"
                     "_mine = 1\n"
                     "engine._create_engine, config._cache, _mine, engine.__name__\n")
    assert private_uses(probe, "tests.house.probe") == {"chalicelib.db.engine:_flat_array",
                                                        "chalicelib.db.engine:_create_engine",
                                                        "chalicelib.config:_cache"}
    assert private_uses(probe, "chalicelib.db.engine") == {"chalicelib.config:_cache"}
