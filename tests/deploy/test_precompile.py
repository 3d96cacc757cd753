"""infra/precompile.py on small zips made here (fast; the real package is checked in
test_chalice_package.py): which files get bytecode, that it is used unchecked, that the zip
is only appended to, and that it refuses a runtime its bytecode would not fit."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "infra"))

import precompile  # noqa: E402  (infra/precompile.py)

TIME = (1980, 1, 1, 0, 0, 0)
FILES = {
    "app.py": "import pkg.mod\nVALUE = pkg.mod.VALUE\n",
    "pkg/__init__.py": "",
    "pkg/mod.py": "VALUE = 'from source'\n",
    "pkg/tool.py": "#!/usr/bin/env python\n",
    "pkg/broken.py": "def (:\n",
    "pkg-1.0.dist-info/hook.py": "x = 1\n",
    "pkg/data.json": "{}",
    "sqlalchemy/testing/fixtures.py": "x = 1\n",
    "aws_lambda_powertools/utilities/parser/models.py": "x = 1\n",
    "aws_lambda_powertools/utilities/typing/lambda_context.py": "x = 1\n",
}
EXECUTABLE = "pkg/tool.py"


def _zip(path):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in FILES.items():
            info = zipfile.ZipInfo(name, TIME)
            mode = 0o755 if name == EXECUTABLE else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, text)
    return path


def test_bytecode_for_importable_modules_only(tmp_path):
    path = _zip(tmp_path / "deployment.zip")
    done = precompile.precompile(str(path))
    assert [line.split(":")[0] for line in done["failed"]] == ["pkg/broken.py"]
    names = set(zipfile.ZipFile(path).namelist())
    tag = sys.implementation.cache_tag
    for name in ("app.py", "pkg/__init__.py", "pkg/mod.py", "pkg/tool.py",
                 "aws_lambda_powertools/utilities/typing/lambda_context.py"):
        assert precompile.cached_name(name) in names, name
    assert precompile.cached_name("app.py") == f"__pycache__/app.{tag}.pyc"
    assert precompile.cached_name("pkg/mod.py") == f"pkg/__pycache__/mod.{tag}.pyc"
    for name in ("pkg/broken.py", "pkg-1.0.dist-info/hook.py", "sqlalchemy/testing/fixtures.py",
                 "aws_lambda_powertools/utilities/parser/models.py"):
        assert precompile.cached_name(name) not in names, name
    assert done["added"] == 5


def test_only_appends_and_runs_once(tmp_path):
    path = _zip(tmp_path / "deployment.zip")
    original = path.read_bytes()
    before = {info.filename: info for info in zipfile.ZipFile(path).infolist()}
    precompile.precompile(str(path))
    once = path.read_bytes()
    after = {info.filename: info for info in zipfile.ZipFile(path).infolist()}
    first_added = min(info.header_offset for name, info in after.items() if name not in before)
    assert once[:first_added] == original[:first_added]
    for name, info in before.items():
        assert after[name].header_offset == info.header_offset
        assert zipfile.ZipFile(path).read(name) == FILES[name].encode()
    tool = after[precompile.cached_name(EXECUTABLE)]
    assert stat.S_IMODE(tool.external_attr >> 16) == 0o755 and tool.date_time == TIME
    assert precompile.precompile(str(path))["added"] == 0
    assert path.read_bytes() == once


def test_unchecked_bytecode_is_what_imports(tmp_path):
    """The .pyc wins even over a source edited after packaging: nothing stats or hashes the
    source on import, which is why the build directory must be new for every package."""
    path = _zip(tmp_path / "deployment.zip")
    precompile.precompile(str(path))
    task = tmp_path / "task"
    zipfile.ZipFile(path).extractall(task)
    (task / "pkg" / "mod.py").write_text("VALUE = 'edited'\n")
    probe = precompile.cold_import(str(task), "print(app.VALUE)")
    assert probe["compiled"] == []
    assert {"app.py", "pkg/mod.py"} <= set(probe["loaded"])
    out = subprocess.run([sys.executable, "-c", "import app; print(app.VALUE)"], cwd=task,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "from source"


def test_project_cache_replaced_or_refused(tmp_path):
    path = _zip(tmp_path / "deployment.zip")
    project = tmp_path / "project"
    with pytest.raises(SystemExit, match="chalice package"):
        precompile.precompile_package(str(path), str(project))
    assert zipfile.ZipFile(path).namelist() == list(FILES)  # untouched when refused
    cache = project / ".chalice" / "deployments"
    cache.mkdir(parents=True)
    cached = cache / "0123abcd-python3.11.zip"
    cached.write_bytes(path.read_bytes())
    other = cache / "stale-python3.11.zip"
    other.write_bytes(b"PK old")
    precompile.precompile_package(str(path), str(project))
    assert cached.read_bytes() == path.read_bytes()
    assert other.read_bytes() == b"PK old"


def test_refuses_a_runtime_the_bytecode_does_not_fit(monkeypatch):
    monkeypatch.setattr(precompile, "lambda_runtime", lambda: "python3.99")
    with pytest.raises(SystemExit, match="python3.99"):
        precompile.check_runtime()
    monkeypatch.setattr(precompile, "lambda_runtime",
                        lambda: "python%d.%d" % sys.version_info[:2])
    precompile.check_runtime()


def test_command_line(tmp_path):
    path = _zip(tmp_path / "deployment.zip")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "infra", "precompile.py"),
                          str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "5 .pyc" in out.stdout and "pkg/broken.py" in out.stderr


def test_deploy_script_deploys_the_precompiled_package():
    """deploy.sh: package, precompile it in place of Chalice's cached copy, and only then
    upload it to the migrate function and run chalice deploy in the same project."""
    with open(os.path.join(ROOT, "infra", "deploy.sh"), encoding="utf-8") as fh:
        text = fh.read().replace("\\\n", " ")  # continued lines as one
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.startswith("#")]

    def first(*parts):
        return next(i for i, line in enumerate(lines) if all(part in line for part in parts))

    package = first('"$CHALICE" package', '"$BUILD/project"', '"$BUILD/package"')
    step = first("infra/precompile.py", '--project "$BUILD/project"',
                 '"$BUILD/package/deployment.zip"')
    migrate = first("update-function-code", "$BUILD/package/deployment.zip")
    deploy = first('cd "$BUILD/project"', '"$CHALICE" deploy')
    assert package < step < migrate < deploy
