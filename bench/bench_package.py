"""Deployment figures: the zipped Lambda package that `chalice package` builds (from the same
build directory infra/deploy.sh deploys) and the cold import time of app.py in a fresh
interpreter (best of N), the part of a Lambda cold start that is ours: from the build
directory the package is zipped from (infra/build.py precompiles chalicelib, as Lambda gets
it) and from the source tree (compiled on every import when bytecode is not written, e.g.
PYTHONDONTWRITEBYTECODE=1). Also the heaviest imports, so it is clear where a cold start goes.

Aims: under 25 MB zipped, under 400 ms import.

Run: .venv/bin/python bench/bench_package.py [--no-package]"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "infra"))

from bench.common import TABLE_HEAD, row  # noqa: E402

AIM_ZIP_MB = 25
AIM_IMPORT_MS = 400


def package_size() -> int:
    import build  # infra/build.py

    with tempfile.TemporaryDirectory() as work:
        project = build.build(os.path.join(work, "project"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({"AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                    "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
        chalice = os.path.join(os.path.dirname(sys.executable), "chalice")
        subprocess.run([chalice, "package", "--stage", "prod", os.path.join(work, "out")],
                       cwd=project, env=env, check=True, capture_output=True)
        return os.path.getsize(os.path.join(work, "out", "deployment.zip"))


def best_import(code: str, runs: int = 7, cwd: str = ROOT) -> float:
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", "import time; t=time.perf_counter(); "
                              + code + "; print(time.perf_counter()-t)"],
                             cwd=cwd, capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return min(times)


def heaviest_imports(limit: int = 10) -> list[tuple[int, str]]:
    """Self import time summed per top-level package (python -X importtime -c "import app")."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import app"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stderr
    totals: dict[str, int] = {}
    for line in out.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \| *(\S+)", line)
        if match:
            top = match.group(2).split(".")[0]
            if top == "chalicelib":  # ours: per module group, that is where edits go
                top = ".".join(match.group(2).split(".")[:3])
            totals[top] = totals.get(top, 0) + int(match.group(1))
    return sorted(((us, name) for name, us in totals.items()), reverse=True)[:limit]


def packaged_import() -> float:
    import build  # infra/build.py

    with tempfile.TemporaryDirectory() as work:
        return best_import("import app", cwd=build.build(os.path.join(work, "project")))


def main() -> None:
    app_import = best_import("import app")
    packaged = packaged_import()
    baseline = best_import("import json")
    print(TABLE_HEAD)
    if "--no-package" not in sys.argv:
        size = package_size()
        print(row("deployment.zip (chalice package)", f"{size / 1e6:.1f} MB",
                  f"{AIM_ZIP_MB} MB aim", size / (AIM_ZIP_MB * 1e6), f"< {AIM_ZIP_MB} MB"))
    print(row("cold import of app.py as packaged (best of 7)", f"{packaged * 1000:.0f} ms",
              f"{baseline * 1000:.1f} ms (import json)", packaged / max(baseline, 1e-9),
              f"< {AIM_IMPORT_MS} ms absolute"))
    print(row("cold import of app.py, source tree (best of 7)", f"{app_import * 1000:.0f} ms",
              f"{baseline * 1000:.1f} ms (import json)", app_import / max(baseline, 1e-9),
              "context (bytecode cached or not)"))
    print("\nimport time by package (self time, one run):")
    for micros, name in heaviest_imports():
        print(f"  {micros / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
