"""No test module imports another test module (issue 36 item 4; docs/testing.md).

A helper or a fixture two test files share lives in tests/support/ (helpers, by topic) or in a
conftest.py (fixtures, in the directory whose tests use them), never in a test module that
others import: importing a test module runs its module-level code, makes pytest see its tests
twice in one namespace, and ties the two files' fates together. Read from the source with ast:
``import tests.x.test_y``, ``from tests.x.test_y import name`` and ``from tests.x import
test_y``, at module level or inside a function, relative forms included."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_test_module(module: str) -> bool:
    return module.split(".")[0] == "tests" and module.split(".")[-1].startswith("test_")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def imported_test_modules(path: Path, me: str | None = None) -> set[str]:
    """The test modules the file ``path`` (the module ``me``, by default named from its path)
    imports."""
    me = me or _module_name(path)
    package = me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if _is_test_module(alias.name)}
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            if _is_test_module(source):
                found.add(source)
            found |= {f"{source}.{alias.name}" for alias in node.names
                      if _is_test_module(f"{source}.{alias.name}")}
    return found - {me}



def test_no_test_module_imports_another():
    found = {f"{path.relative_to(ROOT)} imports {module}"
             for path in (ROOT / "tests").rglob("test_*.py")
             for module in imported_test_modules(path)}
    assert found == set(), "move the shared helper to tests/support/ or the fixture to a conftest.py"


def test_the_check_sees_every_form(tmp_path):
    """Each way of importing a test module is found; helpers, conftest and support are not."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import tests.sending.test_sending\n"
                     "from tests.delivery.test_worker import park_message\n"
                     "from tests.smtp import test_protocol\n"
                     "from .test_modes import later\n"
                     "from tests.support.sending import rcpt\n"
                     "from tests.support.accounts import make_user\n"
                     "from tests.browser.conftest import Console\n"
                     "def f():\n"
                     "    from tests.inbound.test_bounces import dsn\n")
    assert imported_test_modules(probe, "tests.sending.test_probe") == {
        "tests.sending.test_sending", "tests.delivery.test_worker", "tests.smtp.test_protocol",
        "tests.sending.test_modes", "tests.inbound.test_bounces"}
