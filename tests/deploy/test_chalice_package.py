"""`chalice package` builds the deployment offline (no AWS credentials) from the same build
directory infra/deploy.sh uses, and infra/precompile.py adds the third-party bytecode as the
deploy script does; the generated CloudFormation must wire what the app declares, and the zip
must import from bytecode only."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "infra"))

import build  # noqa: E402  (infra/build.py)
import precompile  # noqa: E402  (infra/precompile.py)

QUEUES = ("deliveries", "webhooks", "inbound", "bulk")
MAX_ZIP_BYTES = 25 * 1024 * 1024


def _chalice_package(project, out):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k not in ("SQS_QUEUE_PREFIX", "DATABASE_URL")}
    env.update({"AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    chalice = os.path.join(os.path.dirname(sys.executable), "chalice")
    result = subprocess.run(
        [chalice, "package", "--stage", "prod", "--merge-template",
         os.path.join(ROOT, "infra", "gateway-responses.json"), str(out)],
        cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def package_build(tmp_path_factory):
    """One package build, as infra/deploy.sh makes it: chalice package, then precompile."""
    work = tmp_path_factory.mktemp("package")
    project = build.build(str(work / "project"))
    out = work / "out"
    _chalice_package(project, out)
    zip_path = out / "deployment.zip"
    raw = work / "raw.zip"
    shutil.copyfile(zip_path, raw)
    precompile.precompile_package(str(zip_path), project)
    with open(out / "sam.json", encoding="utf-8") as fh:
        template = json.load(fh)
    return {"template": template, "zip": zip_path, "raw": raw, "project": project,
            "work": work}


@pytest.fixture(scope="module")
def packaged(package_build):
    return package_build["template"], package_build["zip"]


def _functions(template):
    return {name: res["Properties"] for name, res in template["Resources"].items()
            if res["Type"] == "AWS::Serverless::Function"}


def _config():
    with open(os.path.join(ROOT, ".chalice", "config.json"), encoding="utf-8") as fh:
        return json.load(fh)


def test_sqs_event_sources_for_the_three_queues(packaged):
    template, _ = packaged
    prefix = _config()["stages"]["prod"]["environment_variables"]["SQS_QUEUE_PREFIX"]
    wired = {}
    for props in _functions(template).values():
        for event in props.get("Events", {}).values():
            if event["Type"] == "SQS":
                queue = event["Properties"]["Queue"]["Fn::Sub"].rsplit(":", 1)[-1]
                wired[queue] = props
    assert set(wired) == {prefix + q for q in QUEUES}
    # Deliveries: up to 100 wake-ups an invocation, gathered for up to 1 s, carried side by
    # side (docs/capacity.md, "The deliveries mapping").
    [deliveries] = [e["Properties"] for e in wired[prefix + "deliveries"]["Events"].values()
                    if e["Type"] == "SQS"]
    assert (deliveries["BatchSize"], deliveries["MaximumBatchingWindowInSeconds"]) == (100, 1)
    visibility = {"deliveries": 5400, "webhooks": 1080, "inbound": 2160, "bulk": 1800}  # infra/queues
    for queue, props in wired.items():
        assert props["Environment"]["Variables"]["QUEUE_BACKEND"] == "sqs"
        assert props["ReservedConcurrentExecutions"] >= 1
        # SQS event sources want visibility >= 6x the function timeout.
        assert visibility[queue[len(prefix):]] >= 6 * props["Timeout"]
        # A claim must outlive the function that holds it.
        claim = float(props["Environment"]["Variables"]["CLAIM_TIMEOUT_SECONDS"])
        assert claim > props["Timeout"]


def test_sweeper_and_retention_schedules(packaged):
    template, _ = packaged
    schedules = sorted(event["Properties"]["Schedule"] for props in _functions(template).values()
                       for event in props.get("Events", {}).values()
                       if event["Type"] == "Schedule")
    # prune and check_domains hourly, the sweeper every minute
    assert schedules == ["rate(1 hour)", "rate(1 hour)", "rate(1 minute)"]


def test_api_routes_match_the_app(packaged):
    from app import app

    template, _ = packaged
    paths = template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]["paths"]
    packaged_routes = {(path, method.upper()) for path, item in paths.items()
                       for method in item if not method.startswith("x-")}
    routes = {(path, method) for path, methods in app.routes.items() for method in methods}
    assert routes <= packaged_routes
    assert {("/health", "GET"), ("/api/v2/server/messages", "POST"),
            ("/api/v2/openapi.json", "GET")} <= packaged_routes


def test_migrate_function_vpc_and_secrets(packaged):
    template, _ = packaged
    functions = _functions(template)
    migrate = functions["Migrate"]
    assert migrate["Handler"] == "app.migrate"
    assert "ADMIN_API_KEY_SECRET_ARN" in migrate["Environment"]["Variables"]
    for props in functions.values():
        assert props["VpcConfig"]["SubnetIds"] and props["VpcConfig"]["SecurityGroupIds"]
        env = props["Environment"]["Variables"]
        assert env["DATABASE_SECRET_ARN"] and env["SIGNING_KEY_SECRET_ARN"]
    # Only the migrate function may read the admin key, or connect as the tables' owner, with
    # a role of its own (.chalice/policy-migrate.json). infra/deploy.sh finds it by handler.
    assert "ADMIN_API_KEY_SECRET_ARN" not in functions["APIHandler"]["Environment"]["Variables"]
    assert [n for n, p in functions.items() if p["Handler"] == "app.migrate"] == ["Migrate"]
    for name, props in functions.items():
        env = props["Environment"]["Variables"]
        assert ("DATABASE_OWNER_SECRET_ARN" in env) == (name == "Migrate"), name
        assert bool(env["DATABASE_OWNER_URL"]) == (name == "Migrate"), name
        if name != "Migrate":
            assert props["Role"] != migrate["Role"], name


def test_only_the_deliveries_worker_leaves_through_the_delivery_nat(packaged):
    """Outbound SMTP leaves from the delivery subnets (behind the NAT gateway whose Elastic
    IP is the sending address, infra/template.yaml); every other function stays in the
    private subnets."""
    template, _ = packaged
    for name, props in _functions(template).items():
        subnets = props["VpcConfig"]["SubnetIds"]
        assert subnets == (["${DeliverySubnetIds}"] if name == "DeliveriesWorker"
                           else ["${PrivateSubnetIds}"]), name


def test_unknown_routes_answer_the_envelope_404(packaged):
    template, _ = packaged
    responses = {res["Properties"]["ResponseType"]: res["Properties"]
                 for res in template["Resources"].values()
                 if res["Type"] == "AWS::ApiGateway::GatewayResponse"}
    missing = responses["MISSING_AUTHENTICATION_TOKEN"]
    assert missing["StatusCode"] == "404" and missing["RestApiId"] == {"Ref": "RestAPI"}
    body = missing["ResponseTemplates"]["application/json"].replace("$context.httpMethod", "GET") \
        .replace("$context.path", "/nope")
    assert json.loads(body)["error"]["code"] == "NotFound"


def test_deployment_package_is_small_and_lean(packaged):
    _, zip_path = packaged
    assert os.path.getsize(zip_path) < MAX_ZIP_BYTES
    names = zipfile.ZipFile(zip_path).namelist()
    assert "app.py" in names and "chalicelib/api/openapi.py" in names
    assert not any(name.startswith(("botocore/", "boto3/")) for name in names)


def test_every_setting_is_configured_in_every_stage():
    from chalicelib.config import KEYS

    for stage, settings in _config()["stages"].items():
        env = settings["environment_variables"]
        missing = [key.env for key in KEYS if key.env not in env]
        assert not missing, (stage, missing)


def _third_party_sources(names):
    return [name for name in names if name.endswith(".py") and precompile.importable(name)
            and not name.startswith(("chalicelib/", "app.py"))]


def test_every_third_party_module_has_unchecked_hash_bytecode(package_build):
    archive = zipfile.ZipFile(package_build["zip"])
    entries = {info.filename: info for info in archive.infolist()}
    sources = _third_party_sources(entries)
    assert len(sources) > 1000
    compiled = [name for name in sources if not precompile.left_out(name)]
    assert any(name.startswith("sqlalchemy/orm/") for name in compiled)
    assert any(name.startswith("pydantic/") for name in compiled)
    for name in compiled:
        pyc = entries.get(precompile.cached_name(name))
        assert pyc is not None, name
        data = archive.read(pyc)
        assert data[:4] == importlib.util.MAGIC_NUMBER, name
        assert int.from_bytes(data[4:8], "little") == precompile.UNCHECKED_HASH_FLAGS, name
        assert data[8:16] == importlib.util.source_hash(archive.read(name)), name
        assert pyc.external_attr == entries[name].external_attr
        assert pyc.date_time == entries[name].date_time
    for name in ("app.py", "chalice/app.py", "chalicelib/api/openapi.py"):
        assert precompile.cached_name(name) in entries
    left_out = [name for name in sources if precompile.left_out(name)]
    assert left_out and not any(precompile.cached_name(name) in entries for name in left_out)
    assert precompile.TAG == "cpython-%d%d" % sys.version_info[:2]
    assert precompile.lambda_runtime() == "python%d.%d" % sys.version_info[:2]


def test_precompiling_keeps_every_packaged_entry_byte_identical(package_build):
    raw, done = zipfile.ZipFile(package_build["raw"]), zipfile.ZipFile(package_build["zip"])
    before = {info.filename: info for info in raw.infolist()}
    after = {info.filename: info for info in done.infolist()}
    assert set(before) < set(after)
    added = [info for name, info in after.items() if name not in before]
    assert all(info.filename.endswith(f".{precompile.TAG}.pyc") for info in added)
    for name, info in before.items():
        kept = after[name]
        assert (kept.header_offset, kept.CRC, kept.compress_size, kept.compress_type,
                kept.date_time, kept.external_attr) == \
            (info.header_offset, info.CRC, info.compress_size, info.compress_type,
             info.date_time, info.external_attr), name
    start = min(info.header_offset for info in added)
    with open(package_build["raw"], "rb") as fh_raw, open(package_build["zip"], "rb") as fh:
        assert fh.read(start) == fh_raw.read(start)


def test_chalice_deploy_reuses_the_precompiled_package(package_build):
    """deploy.sh precompiles with --project: the cached package Chalice's deploy and package
    commands look up in the project is then the precompiled zip, which they reuse as is."""
    out = package_build["work"] / "again"
    stdout = _chalice_package(package_build["project"], out)
    assert "Reusing existing deployment package" in stdout
    with open(out / "deployment.zip", "rb") as again, \
            open(package_build["zip"], "rb") as precompiled:
        assert again.read() == precompiled.read()


def _extract(zip_path, into):
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(into)
    return str(into)


def _files(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


def test_cold_import_of_the_package_compiles_nothing(package_build):
    """app.py and what the first request or message imports, from the extracted zip with
    bytecode writing off (Lambda's /var/task is read-only): every module of ours or of a
    wheel comes from its .pyc; without the step the same import compiles hundreds."""
    root = _extract(package_build["zip"], package_build["work"] / "task")
    files = _files(root)
    probe = precompile.cold_import(root, precompile.FIRST_USE)
    assert probe["dont_write_bytecode"] == 1
    assert probe["compiled"] == []
    loaded = set(probe["loaded"])
    assert {"app.py", "pydantic/main.py", "sqlalchemy/orm/session.py", "chevron/renderer.py",
            "sqlalchemy/dialects/postgresql/pg8000.py", "dkim/__init__.py",
            "aws_lambda_powertools/logging/logger.py"} <= loaded
    assert not [name for name in loaded if precompile.left_out(name)]
    assert _files(root) == files  # nothing written

    raw_root = _extract(package_build["raw"], package_build["work"] / "raw-task")
    raw_probe = precompile.cold_import(raw_root, precompile.FIRST_USE)
    assert set(raw_probe["loaded"]) == loaded
    assert {"app.py", "pydantic/main.py", "sqlalchemy/orm/session.py"} <= \
        set(raw_probe["compiled"])
    assert not [name for name in raw_probe["compiled"] if name.startswith("chalicelib/")]
