"""Deployment figures, from the package infra/deploy.sh deploys: infra/build.py's build
directory, `chalice package`, then infra/precompile.py (bytecode for the third-party wheels).

* the zip's size as `chalice package` writes it and after precompiling (what is deployed);
* the cold import of app.py "as packaged": the zip extracted, app.py imported in a fresh
  interpreter with the extraction as sys.path[0] and bytecode writing off (Lambda's /var/task
  is read-only), best of N, rounds alternating between the precompiled zip and the same zip
  without the step (where every third-party module compiles on every cold start); boto3
  comes from this venv, as the Lambda runtime provides it;
* for context, app.py from the build directory and from the source tree (third-party
  modules from this venv, with its bytecode: what this bench measured before the zip was
  precompiled), and the heaviest imports, so it is clear where a cold start goes.

Aims: under 25 MB zipped, under 400 ms import.

Run: .venv/bin/python bench/bench_package.py [--rounds N] [--no-package]
(--no-package: no chalice package, only the build directory import: no zip figures.)"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "infra"))

from bench.common import TABLE_HEAD, row  # noqa: E402

AIM_ZIP_MB = 25
AIM_IMPORT_MS = 400


def build_package(work: str) -> tuple[str, str, str]:
    """(build directory, zip as chalice package writes it, the precompiled zip deploy.sh
    deploys)."""
    import build  # infra/build.py
    import precompile  # infra/precompile.py

    project = build.build(os.path.join(work, "project"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    chalice = os.path.join(os.path.dirname(sys.executable), "chalice")
    subprocess.run([chalice, "package", "--stage", "prod", os.path.join(work, "out")],
                   cwd=project, env=env, check=True, capture_output=True)
    deployed = os.path.join(work, "out", "deployment.zip")
    raw = os.path.join(work, "raw.zip")
    shutil.copyfile(deployed, raw)
    precompile.check_runtime()
    precompile.precompile_package(deployed, project)
    return project, raw, deployed


def extract(zip_path: str, into: str) -> str:
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(into)
    return into


def packaged_imports(dirs: dict[str, str], rounds: int) -> dict[str, list[dict]]:
    """Alternating cold imports of app.py from each directory (precompile.PROBE)."""
    import precompile  # infra/precompile.py

    runs: dict[str, list[dict]] = {name: [] for name in dirs}
    for _ in range(rounds):
        for name, directory in dirs.items():
            runs[name].append(precompile.cold_import(directory))
    return runs


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


def build_dir_import(runs: int) -> float:
    import build  # infra/build.py

    with tempfile.TemporaryDirectory() as work:
        return best_import("import app", runs, cwd=build.build(os.path.join(work, "project")))


def main() -> None:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
    app_import = best_import("import app", rounds)
    baseline = best_import("import json", rounds)
    print(TABLE_HEAD)
    if "--no-package" in sys.argv:
        packaged = build_dir_import(rounds)
        print(row(f"cold import of app.py, build directory (best of {rounds})",
                  f"{packaged * 1000:.0f} ms", f"{baseline * 1000:.1f} ms (import json)",
                  packaged / max(baseline, 1e-9), f"< {AIM_IMPORT_MS} ms absolute"))
    else:
        with tempfile.TemporaryDirectory() as work:
            project, raw, deployed = build_package(work)
            raw_size, size = os.path.getsize(raw), os.path.getsize(deployed)
            runs = packaged_imports({"raw": extract(raw, os.path.join(work, "raw")),
                                     "deployed": extract(deployed, os.path.join(work, "task")),
                                     "build": project}, rounds)
        best = {name: min(run["seconds"] for run in results) for name, results in runs.items()}
        cpu = {name: min(run["cpu_seconds"] for run in results)
               for name, results in runs.items()}
        compiled = {name: len(results[0]["compiled"]) for name, results in runs.items()}
        print(row("deployment.zip as deployed (chalice package + precompile)",
                  f"{size / 1e6:.1f} MB", f"{AIM_ZIP_MB} MB aim", size / (AIM_ZIP_MB * 1e6),
                  f"< {AIM_ZIP_MB} MB"))
        print(row("deployment.zip without third-party bytecode (chalice package alone)",
                  f"{raw_size / 1e6:.1f} MB", f"{size / 1e6:.1f} MB (deployed)",
                  raw_size / size, "context"))
        print(row(f"cold import of app.py as packaged: deployed zip, extracted (best of "
                  f"{rounds}; {compiled['deployed']} modules compiled)",
                  f"{best['deployed'] * 1000:.0f} ms", f"{baseline * 1000:.1f} ms (import json)",
                  best["deployed"] / max(baseline, 1e-9), f"< {AIM_IMPORT_MS} ms absolute"))
        print(row(f"cold import of app.py, zip without third-party bytecode (best of {rounds}; "
                  f"{compiled['raw']} modules compiled)", f"{best['raw'] * 1000:.0f} ms",
                  f"{best['deployed'] * 1000:.0f} ms (deployed zip)",
                  best["raw"] / max(best["deployed"], 1e-9), "context (before the step)"))
        print(row(f"CPU time of that import (best of {rounds}): without / with bytecode",
                  f"{cpu['raw'] * 1000:.0f} ms", f"{cpu['deployed'] * 1000:.0f} ms (deployed)",
                  cpu["raw"] / max(cpu["deployed"], 1e-9), "context (less load-sensitive)"))
        print(row(f"cold import of app.py, build directory, third-party modules from this venv "
                  f"(the earlier bench's 'as packaged'; best of {rounds})",
                  f"{best['build'] * 1000:.0f} ms",
                  f"{best['deployed'] * 1000:.0f} ms (deployed zip)",
                  best["build"] / max(best["deployed"], 1e-9), "context"))
    print(row(f"cold import of app.py, source tree (best of {rounds})",
              f"{app_import * 1000:.0f} ms", f"{baseline * 1000:.1f} ms (import json)",
              app_import / max(baseline, 1e-9), "context (bytecode cached or not)"))
    print("\nimport time by package (self time, one run):")
    for micros, name in heaviest_imports():
        print(f"  {micros / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
