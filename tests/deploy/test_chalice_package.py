"""`chalice package` builds the deployment offline (no AWS credentials) from the same build
directory infra/deploy.sh uses; the generated CloudFormation must wire what the app declares."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "infra"))

import build  # noqa: E402  (infra/build.py)

QUEUES = ("deliveries", "webhooks", "inbound", "bulk")
MAX_ZIP_BYTES = 25 * 1024 * 1024


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    work = tmp_path_factory.mktemp("package")
    project = build.build(str(work / "project"))
    out = work / "out"
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
    with open(out / "sam.json", encoding="utf-8") as fh:
        template = json.load(fh)
    return template, out / "deployment.zip"


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
    # Only the migrate function may read the admin key.
    assert "ADMIN_API_KEY_SECRET_ARN" not in functions["APIHandler"]["Environment"]["Variables"]


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
