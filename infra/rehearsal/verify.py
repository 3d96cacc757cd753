"""Checks of what the simulator holds after a deploy (a test tool).

* ``deployed_code``: every function's code and configuration, read back from the simulator,
  is the build's: CodeSha256 is the sha256 of the package deploy.sh built (and
  precompiled); the docker volume moto mounts at /var/task (named by the hex sha256 of the
  code it stores) holds exactly the zip's files; handler, runtime, timeout, memory and
  environment are the built project's .chalice/config.json (placeholders filled).
* ``migrated_before_switch``: in deploy.sh's log, the migrate function ran the new code
  before `chalice deploy` switched the rest.
* ``service_role``: the role the functions connect as exists and row-level security binds
  it (not a superuser, no BYPASSRLS, owns no table).
* ``created``: one line per kind of resource the deploys created in the simulator.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import tarfile
import zipfile

from checks import check

STAGE = "dev"


def _sha256(path: str) -> bytes:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").digest()


def _volume_files(volume: str) -> set[str]:
    tar = subprocess.run(["docker", "run", "--rm", "-v", f"{volume}:/var/task:ro", "busybox",
                          "tar", "-c", "-C", "/var/task", "."], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        return {m.name.removeprefix("./") for m in archive.getmembers() if m.isfile()}


def deployed_code(account, build: str, release: str) -> None:
    package = os.path.join(build, "package", "deployment.zip")
    digest = _sha256(package)
    with open(os.path.join(build, "project", ".chalice", "config.json"), encoding="utf-8") as fh:
        stage = json.load(fh)["stages"][STAGE]
    client = account.client("lambda")
    prefix = f"email-service-{STAGE}"
    functions = [f for f in client.list_functions()["Functions"]
                 if f["FunctionName"] == prefix or f["FunctionName"].startswith(prefix + "-")]
    check(len(functions) == len(stage["lambda_functions"]),
          f"{release}: {len(functions)} functions deployed, one per function of the config")
    for summary in functions:
        # Chalice names the API's function after the stage alone.
        name = summary["FunctionName"].removeprefix(prefix + "-") \
            if summary["FunctionName"] != prefix else "api_handler"
        config = client.get_function(FunctionName=summary["FunctionName"])["Configuration"]
        wanted = dict(stage["environment_variables"],
                      **stage["lambda_functions"][name].get("environment_variables", {}))
        settings = stage["lambda_functions"][name]
        problems = []
        if config["CodeSha256"] != base64.b64encode(digest).decode():
            problems.append("CodeSha256")
        if config["Runtime"] != "python3.11":
            problems.append(f"runtime {config['Runtime']}")
        if config["Timeout"] != settings["lambda_timeout"] \
                or config["MemorySize"] != settings["lambda_memory_size"]:
            problems.append("timeout/memory")
        if config.get("Environment", {}).get("Variables") != wanted:
            problems.append("environment")
        if config.get("TracingConfig", {}).get("Mode") != "Active":
            problems.append("tracing")
        check(not problems, f"{release}: {name} ({config['Handler']}) is the built zip and "
                            f"configuration" + (f" -- differs: {problems}" if problems else ""))
    volume = digest.hex()
    present = subprocess.run(["docker", "volume", "inspect", volume],
                             capture_output=True).returncode == 0
    if present:
        with zipfile.ZipFile(package) as archive:
            names = {i.filename for i in archive.infolist() if not i.is_dir()}
        check(_volume_files(volume) == names, f"{release}: the code moto runs (volume "
                                              f"{volume[:12]}) holds exactly the zip's "
                                              f"{len(names)} files")


def migrated_before_switch(log_path: str) -> None:
    with open(log_path, encoding="utf-8") as fh:
        log = fh.read()
    migrate = log.find("migrating with the new code and configuration before traffic switches")
    switch = log.find("==> chalice deploy")
    check(0 <= migrate < switch and '"revision"' in log[migrate:switch],
          "deploy.sh migrated through the migrate function with the new code before "
          "chalice deploy switched the rest")


def service_role(database: dict, role: str) -> None:
    import pg8000.native

    conn = pg8000.native.Connection(database["user"], host=database["host"], port=5432,
                                    password=database["password"] or None,
                                    database=database["name"])
    try:
        found = conn.run("SELECT r.rolsuper, r.rolbypassrls, EXISTS (SELECT 1 FROM pg_tables t "
                         "WHERE t.tableowner = r.rolname) FROM pg_roles r "
                         "WHERE r.rolname = :role", role=role)
    finally:
        conn.close()
    check(found == [[False, False, False]],
          f"the functions connect as {role}, made by the migrate step: not a superuser, no "
          "BYPASSRLS, owner of no table (row-level security binds it)")


def created(account) -> list[str]:
    lam, events = account.client("lambda"), account.client("events")
    lines = [f"Lambda function {f['FunctionName']} ({f['Handler']}, {f['MemorySize']} MB, "
             f"{f['Timeout']} s)" for f in lam.list_functions()["Functions"]]
    for m in lam.list_event_source_mappings()["EventSourceMappings"]:
        lines.append(f"SQS event source {m['EventSourceArn'].rsplit(':', 1)[-1]} -> "
                     f"{m['FunctionArn'].rsplit(':', 1)[-1]} (batch {m['BatchSize']})")
    for rule in events.list_rules()["Rules"]:
        lines.append(f"EventBridge rule {rule['Name']} {rule.get('ScheduleExpression', '')}")
    roles = [r["RoleName"] for r in account.client("iam").list_roles()["Roles"]]
    lines.append(f"IAM roles: {', '.join(sorted(roles))}")
    for api in account.client("apigateway").get_rest_apis()["items"]:
        lines.append(f"REST API {api['name']} ({api['id']})")
    cfn = account.client("cloudformation")
    for s in cfn.describe_stacks()["Stacks"]:
        resources = cfn.list_stack_resources(StackName=s["StackName"])["StackResourceSummaries"]
        kinds: dict[str, int] = {}
        for r in resources:
            kinds[r["ResourceType"]] = kinds.get(r["ResourceType"], 0) + 1
        lines.append(f"stack {s['StackName']} ({s['StackStatus']}): " + ", ".join(
            f"{n} {k}" for k, n in sorted(kinds.items())))
    return lines
