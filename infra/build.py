"""Prepare a Chalice project directory for `chalice package` / `chalice deploy`.

    python infra/build.py OUT_DIR [--stack STACK_NAME] [--region REGION] [--deployed DIR]

* copies app.py, chalicelib/ and .chalice/ (config and IAM policies) into OUT_DIR, and the
  web console (console/, without node_modules) into chalicelib/console_files/;
* compiles chalicelib/ to bytecode (__pycache__, which Chalice zips with it): Lambda's code
  directory is read-only, so without it every cold start compiles our sources again (~95 ms
  of a ~510 ms import). Hash-based and unchecked, because a zip keeps file times only to
  2 s, which would make timestamp-based .pyc files look stale; the build directory is new
  every time, so they never are. The tag (cpython-3XY) is this interpreter's, and Chalice
  takes the Lambda runtime from this interpreter's version too. The third-party wheels get
  theirs after `chalice package`, from infra/precompile.py;
* writes a requirements.txt without what the Lambda runtime already provides or what only the
  SMTP gateway container needs (boto3/botocore/s3transfer: ~16 MB zipped; aiosmtpd), which
  keeps the deployment package well under 25 MB; aws-xray-sdk, whose botocore requirement
  would bring that back, is copied into vendor/ from this environment instead (VENDORED);
* with --stack, replaces every ``${Name}`` in .chalice/*.json by the CloudFormation output
  ``Name`` of the infra stack (an environment variable of the same name wins, for values the
  stack does not know). A list element ``"${Name}"`` whose value has commas becomes several
  elements (subnet ids). Without --stack the placeholders stay, which is what the offline CI
  check packages;
* --deployed DIR: copy Chalice's deployment state (``.chalice/deployed/<stage>.json``) in, so
  an upgrade updates the existing functions instead of creating new ones.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import py_compile
import re
import shutil
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_IN_LAMBDA = {"boto3", "botocore", "s3transfer", "aiosmtpd"}
# Pure-Python packages copied into vendor/ from this environment instead of being resolved by
# pip: aws-xray-sdk (Powertools' Tracer) declares botocore, which would pull ~16 MB into the
# zip although the Lambda runtime has it. Its other dependency, wrapt, is pinned beside it.
VENDORED = {"aws-xray-sdk": "aws_xray_sdk"}
PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def lambda_requirements(text: str) -> str:
    lines = []
    for line in text.splitlines():
        name = re.split(r"[=<>~!\[; ]", line.strip(), maxsplit=1)[0].lower()
        if name in NOT_IN_LAMBDA:
            lines.append(f"# {line.strip()}  (provided by the Lambda runtime or gateway-only)")
        elif name in VENDORED:
            lines.append(f"# {line.strip()}  (vendored without its botocore dependency)")
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def vendor(requirements: str, vendor_dir: str) -> None:
    """Copy each VENDORED package, at its pinned version, from this environment into
    ``vendor_dir`` (Chalice adds it to the zip as it is)."""
    from importlib import metadata, util

    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", requirements, re.MULTILINE))
    pins = {name.lower(): version for name, version in pins.items()}
    for dist, package in VENDORED.items():
        installed = metadata.version(dist)
        if pins.get(dist) != installed:
            raise SystemExit(f"{dist} {installed} is installed but requirements.txt pins "
                             f"{pins.get(dist)}: run make install")
        source = os.path.dirname(util.find_spec(package).origin)
        shutil.copytree(source, os.path.join(vendor_dir, package),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def substitute(node: Any, values: dict[str, str], missing: set[str]) -> Any:
    if isinstance(node, dict):
        return {key: substitute(value, values, missing) for key, value in node.items()}
    if isinstance(node, list):
        out: list[Any] = []
        for item in node:
            whole = PLACEHOLDER.fullmatch(item) if isinstance(item, str) else None
            if whole and whole.group(1) in values:
                out.extend(part.strip() for part in values[whole.group(1)].split(",")
                           if part.strip())
            else:
                out.append(substitute(item, values, missing))
        return out
    if isinstance(node, str):
        def replace(match: re.Match) -> str:
            if match.group(1) not in values:
                missing.add(match.group(1))
                return match.group(0)
            return values[match.group(1)]
        return PLACEHOLDER.sub(replace, node)
    return node


def stack_outputs(stack: str, region: str | None) -> dict[str, str]:
    import boto3

    client = boto3.client("cloudformation", region_name=region)
    described = client.describe_stacks(StackName=stack)["Stacks"][0]
    return {out["OutputKey"]: out["OutputValue"] for out in described.get("Outputs", [])}


def build(out_dir: str, values: dict[str, str] | None = None,
          deployed: str | None = None) -> str:
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    shutil.copy2(os.path.join(ROOT, "app.py"), out_dir)
    shutil.copytree(os.path.join(ROOT, "chalicelib"), os.path.join(out_dir, "chalicelib"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # The web console rides in the same Lambda (same origin as the API; chalicelib/console/files.py
    # looks for it here). The QR-code module comes from `make install` (npm ci).
    shutil.copytree(os.path.join(ROOT, "console"), os.path.join(out_dir, "chalicelib", "console_files"),
                    ignore=shutil.ignore_patterns("node_modules", "package.json",
                                                  "package-lock.json"))
    if not compileall.compile_dir(os.path.join(out_dir, "chalicelib"), quiet=1,
                                  invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH):
        raise SystemExit("chalicelib does not compile")
    chalice_dir = os.path.join(out_dir, ".chalice")
    os.makedirs(chalice_dir)
    missing: set[str] = set()
    for name in sorted(os.listdir(os.path.join(ROOT, ".chalice"))):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(ROOT, ".chalice", name), encoding="utf-8") as fh:
            data = json.load(fh)
        if values is not None:
            data = substitute(data, values, missing)
        with open(os.path.join(chalice_dir, name), "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
    if missing:
        raise SystemExit("unresolved placeholders (no stack output or environment variable): "
                         + ", ".join(sorted(missing)))
    if deployed and os.path.isdir(deployed):
        shutil.copytree(deployed, os.path.join(chalice_dir, "deployed"))
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as fh:
        text = fh.read()
    vendor(text, os.path.join(out_dir, "vendor"))
    requirements = lambda_requirements(text)
    with open(os.path.join(out_dir, "requirements.txt"), "w", encoding="utf-8") as fh:
        fh.write(requirements)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--stack", help="infra stack whose outputs fill ${...} placeholders")
    parser.add_argument("--region")
    parser.add_argument("--deployed", help="directory holding Chalice's deployed/<stage>.json")
    args = parser.parse_args(argv)
    values = None
    if args.stack:
        values = stack_outputs(args.stack, args.region)
        values.update({k: v for k, v in os.environ.items() if PLACEHOLDER.fullmatch("${%s}" % k)})
    build(args.out_dir, values, args.deployed)
    print(args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
