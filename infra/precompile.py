"""Add bytecode for every Python module inside a Lambda deployment zip.

    python infra/precompile.py [--project DIR] [--all] ZIP

Run it on the deployment.zip `chalice package` wrote; with --project (the directory
`chalice package` ran in), the precompiled zip also replaces Chalice's cached copy of it in
DIR/.chalice/deployments/, which `chalice deploy` in DIR then reuses as it is ("Reusing
existing deployment package"): the zip that is deployed is the zip that was measured.

Why: Lambda unpacks the package into /var/task, which is read-only, so Python cannot cache
what it compiles there: without .pyc files in the zip, every cold start compiles every module
it imports from source. infra/build.py compiles chalicelib/ before `chalice package`, but the
third-party wheels Chalice installs (pydantic, SQLAlchemy, Powertools, ...) carry no bytecode;
this step adds it after `chalice package`, to the zip that is deployed.

How: for each ``dir/name.py`` in the zip that has no ``dir/__pycache__/name.<tag>.pyc`` yet,
compile the source and add that entry. The .pyc files are hash-based and unchecked
(PEP 552): the zip's file times say nothing useful (Chalice stamps every entry 1980-01-01,
and a zip keeps times only to 2 s, in local time), so timestamp-based files could look stale
and be compiled again; unchecked ones are used as they are, and the package is never edited
in place on Lambda. The tag (``cpython-3XY``) and magic number are this interpreter's, which
must be the Lambda runtime's: Chalice picks the runtime from the deploying interpreter's
version (python3.11 here, so cpython-311; the magic number does not change between patch
releases of 3.11), and this refuses to run if they differ.

The zip is appended to, not rewritten: every existing entry (data, name, time, mode,
compression) stays byte-identical; only the new entries and the central directory are
written. Each .pyc takes its source's time and mode. A zip that already has all its bytecode
is left untouched, so running it twice is harmless (`chalice deploy` reuses the cached zip
this step edited in ``.chalice/deployments/``).

Left out (LEAVE_OUT, unless --all): modules none of our functions import on a request or a
queue message, which cost the most bytes: bytecode for everything takes the zip from 17.2 to
26.4 MB, over the 25 MB aim (bench/RESULTS.md #9). They still import if something ever
needs them, compiled from source as before. Also files under directories that cannot be
imported (``*.dist-info``, ``*.data``) and files that do not compile on this Python (listed).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
import zipfile

TAG = sys.implementation.cache_tag  # e.g. cpython-311
# PEP 552 flags word: bit 0 = hash-based, bit 1 = check the source hash on import.
UNCHECKED_HASH_FLAGS = 0b01
# Zip path prefixes whose bytecode is left out (compressed .pyc sizes at the pinned versions).
LEAVE_OUT = (
    "alembic/", "mako/",  # only the migrate function, once per deploy (~0.6 MB)
    "sqlalchemy/testing/",  # SQLAlchemy's own test harness (~0.4 MB)
    "sqlalchemy/dialects/mssql/", "sqlalchemy/dialects/mysql/",  # other databases (~0.4 MB)
    "sqlalchemy/dialects/oracle/",
    "pydantic/v1/", "pydantic/mypy.py",  # pydantic 1 compatibility layer, mypy plugin (~0.3 MB)
    "pycparser/",  # cffi's C parser, for building bindings, not for loading them (~0.1 MB)
    "aws_lambda_powertools/event_handler/",  # Chalice routes our requests (~0.2 MB)
    "aws_lambda_powertools/utilities/",  # parser, idempotency, batch, ... (~0.6 MB) except:
)
KEEP = ("aws_lambda_powertools/utilities/__init__.py",  # Logger/Metrics import these
        "aws_lambda_powertools/utilities/jmespath_utils/",
        "aws_lambda_powertools/utilities/typing/")


def lambda_runtime() -> str:
    """The runtime Chalice writes into the functions' configuration for this interpreter."""
    from chalice.config import Config

    return Config.create().lambda_python_version


def check_runtime() -> None:
    here = f"python{sys.version_info.major}.{sys.version_info.minor}"
    runtime = lambda_runtime()
    if runtime != here:
        raise SystemExit(f"Chalice deploys to {runtime} but this is {here}: its bytecode "
                         f"({TAG}) would be ignored there; run this with a {runtime} interpreter")


def cached_name(source: str) -> str:
    head, tail = os.path.split(source)  # zip names use "/" on every platform
    return "/".join(filter(None, [head, "__pycache__", f"{tail[:-3]}.{TAG}.pyc"]))


def importable(name: str) -> bool:
    """Whether the import system could ever load this .py from the zip's root."""
    parts = name.split("/")
    return all(part.isidentifier() for part in parts[:-1]) and parts[-1].endswith(".py")


def left_out(name: str) -> bool:
    return name.startswith(LEAVE_OUT) and not name.startswith(KEEP)


def unchecked_pyc(source: bytes, filename: str) -> bytes:
    code = compile(source, filename, "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + UNCHECKED_HASH_FLAGS.to_bytes(4, "little")
            + importlib.util.source_hash(source) + marshal.dumps(code))


def precompile(path: str, everything: bool = False) -> dict[str, object]:
    """Append the missing .pyc files to the zip at ``path``; returns what was done."""
    size_before = os.path.getsize(path)
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        names = {info.filename for info in infos}
        todo = [info for info in infos if importable(info.filename)
                and (everything or not left_out(info.filename))
                and cached_name(info.filename) not in names]
        compiled: list[tuple[zipfile.ZipInfo, bytes]] = []
        failed: list[str] = []
        for info in todo:
            try:
                data = unchecked_pyc(archive.read(info), info.filename)
            except (SyntaxError, ValueError) as exc:
                failed.append(f"{info.filename}: {exc}")
                continue
            entry = zipfile.ZipInfo(cached_name(info.filename), info.date_time)
            entry.external_attr = info.external_attr
            entry.create_system = info.create_system
            entry.compress_type = zipfile.ZIP_DEFLATED
            compiled.append((entry, data))
    if compiled:
        with zipfile.ZipFile(path, "a") as archive:
            for entry, data in compiled:
                archive.writestr(entry, data)
    return {"added": len(compiled), "failed": failed, "bytes_before": size_before,
            "bytes_after": os.path.getsize(path)}


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def cached_packages(project: str, digest: str) -> list[str]:
    """Chalice's cached copies (``.chalice/deployments/<hash>-<runtime>.zip``) of the zip
    whose sha256 is ``digest``."""
    folder = os.path.join(project, ".chalice", "deployments")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [os.path.join(folder, name) for name in names
            if name.endswith(".zip") and _sha256(os.path.join(folder, name)) == digest]


def precompile_package(path: str, project: str | None = None,
                       everything: bool = False) -> dict[str, object]:
    """precompile() the zip at ``path`` and, with ``project``, put the result in place of
    Chalice's cached copy of it so that `chalice deploy` there deploys this very zip."""
    targets = cached_packages(project, _sha256(path)) if project else []
    if project and not targets:
        raise SystemExit(f"no copy of {path} in {project}/.chalice/deployments: run "
                         "`chalice package` in that directory first")
    done = precompile(path, everything)
    for target in targets:
        shutil.copyfile(path, target)
    return done


# What our functions import after app.py, on their first request or queue message (the lazy
# imports in chalicelib): LEAVE_OUT must not cover any of it (tests/deploy checks).
FIRST_USE = """
import sqlalchemy.dialects.postgresql.pg8000, pg8000.legacy
import cryptography.fernet, cryptography.hazmat.primitives.serialization
import cryptography.hazmat.primitives.asymmetric.rsa
import argon2, chevron, dkim, dns.resolver, email_validator, jwt, pyotp, requests
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.metrics import MetricUnit, single_metric
"""

# Imports app.py the way a cold Lambda does (sys.path[0] is the package root, nothing may be
# written) and reports the time (wall and CPU) and which modules were compiled from source.
PROBE = """
import importlib.machinery, json, os, sys, time
compiled = []
source_to_code = importlib.machinery.SourceFileLoader.source_to_code
def spy(self, data, path, *args, **kwargs):
    compiled.append(os.path.relpath(path))
    return source_to_code(self, data, path, *args, **kwargs)
importlib.machinery.SourceFileLoader.source_to_code = spy
started, cpu = time.perf_counter(), time.process_time()
import app
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
root = os.getcwd() + os.sep
loaded = sorted(os.path.relpath(m.__file__) for m in list(sys.modules.values())
                if (getattr(m, "__file__", None) or "").startswith(root))
print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "compiled": compiled, "loaded": loaded,
                  "dont_write_bytecode": sys.flags.dont_write_bytecode}))
"""


def cold_import(package_dir: str, extra: str = "") -> dict:
    """Run PROBE (then ``extra``, more imports to account for) in a fresh interpreter in an
    extracted package, with bytecode writing off as on Lambda's read-only /var/task."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    code = PROBE.replace("import app\n", "import app\n" + extra + "\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=package_dir, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("zip", metavar="ZIP")
    parser.add_argument("--project", help="directory `chalice package` ran in: replace its "
                        "cached package so that `chalice deploy` there uses this zip")
    parser.add_argument("--all", action="store_true", help="no LEAVE_OUT: every module")
    args = parser.parse_args(argv)
    check_runtime()
    done = precompile_package(args.zip, args.project, args.all)
    for line in done["failed"]:  # type: ignore[union-attr]
        print(f"  not compiled: {line}", file=sys.stderr)
    print(f"{args.zip}: {done['added']} .pyc ({TAG}) added, "
          f"{done['bytes_before'] / 1e6:.1f} -> {done['bytes_after'] / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
