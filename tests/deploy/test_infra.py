"""Offline checks of what an infra team applies: cfn-lint on the templates, the queues and
outputs the Chalice configuration relies on, the gateway image's Dockerfile, the deploy script,
and the secret bootstrap the functions run at cold start."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INFRA = os.path.join(ROOT, "infra")
sys.path.insert(0, INFRA)

import build  # noqa: E402  (infra/build.py)


def _template() -> dict:
    from cfnlint.decode import decode

    template, matches = decode(os.path.join(INFRA, "template.yaml"))
    assert not matches
    return template


def test_cfn_lint_is_clean():
    cfn_lint = os.path.join(os.path.dirname(sys.executable), "cfn-lint")
    result = subprocess.run([cfn_lint, os.path.join(INFRA, "template.yaml")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_queues_match_the_app_and_have_dead_letter_queues():
    resources = _template()["Resources"]
    queues = {res["Properties"]["QueueName"]["Fn::Sub"]: res["Properties"]
              for res in resources.values() if res["Type"] == "AWS::SQS::Queue"}
    for name in ("deliveries", "webhooks", "inbound", "bulk"):
        props = queues[f"email-service-${{Stage}}-{name}"]
        dlq_ref = props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert resources[dlq_ref]["Properties"]["QueueName"]["Fn::Sub"].endswith(name + "-dlq")
        alarms = [res["Properties"] for res in resources.values()
                  if res["Type"] == "AWS::CloudWatch::Alarm"
                  and res["Properties"].get("Namespace") == "AWS/SQS"
                  and res["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0] in
                  (dlq_ref, next(k for k, r in resources.items()
                                 if r["Properties"].get("QueueName") ==
                                 {"Fn::Sub": f"email-service-${{Stage}}-{name}"}))]
        assert {a["MetricName"] for a in alarms} == {"ApproximateNumberOfMessagesVisible",
                                                     "ApproximateAgeOfOldestMessage"}


def test_rate_alarms_read_the_metrics_the_code_writes():
    from chalicelib import observability

    resources = _template()["Resources"]
    names = {name for name, _ in observability.COUNTERS.values()}
    found = {}
    for key in ("DeliveryFailureRateAlarm", "BounceRateAlarm"):
        props = resources[key]["Properties"]
        stats = [m["MetricStat"]["Metric"] for m in props["Metrics"] if "MetricStat" in m]
        assert {m["Namespace"] for m in stats} == {observability.NAMESPACE}
        assert all(m["Dimensions"] == [{"Name": "service",
                                        "Value": {"Fn::Sub": "email-service-${Stage}"}}]
                   for m in stats)
        found[key] = {m["MetricName"] for m in stats}
        assert found[key] <= names and props["AlarmActions"]
    assert found == {"DeliveryFailureRateAlarm": {"MessagesSent", "MessagesFailed"},
                     "BounceRateAlarm": {"MessagesSent", "MessagesBounced"}}
    # The reputation alarms (issue 34): a listing, and a server paused by the guard.
    for key, metric in (("InfrastructureSignalAlarm", "InfrastructureSignals"),
                        ("ReputationPauseAlarm", "ReputationPauses")):
        props = resources[key]["Properties"]
        assert (props["Namespace"], props["MetricName"]) == (observability.NAMESPACE, metric)
        assert metric in names and props["AlarmActions"]
        assert props["Dimensions"] == [{"Name": "service",
                                        "Value": {"Fn::Sub": "email-service-${Stage}"}}]
    lag = resources["DeliveryQueueLagAlarm"]["Properties"]
    assert (lag["Namespace"], lag["MetricName"]) == (observability.NAMESPACE, "QueueLagSeconds")
    # The stages name the service the alarms watch.
    gateway = resources["GatewayTaskDefinition"]["Properties"]["ContainerDefinitions"][0]
    env = {e["Name"]: e["Value"] for e in gateway["Environment"]}
    assert env["METRICS_BACKEND"] == "emf"
    assert env["POWERTOOLS_SERVICE_NAME"] == {"Fn::Sub": "email-service-${Stage}"}
    with open(os.path.join(ROOT, ".chalice", "config.json"), encoding="utf-8") as fh:
        stages = json.load(fh)["stages"]
    for stage, config in stages.items():
        assert config["xray"] is True
        stage_env = config["environment_variables"]
        assert stage_env["POWERTOOLS_SERVICE_NAME"] == f"email-service-{stage}"
        assert (stage_env["METRICS_BACKEND"], stage_env["TRACING"]) == ("emf", "true")


def test_visibility_is_six_times_the_function_timeout():
    resources = _template()["Resources"]
    with open(os.path.join(ROOT, ".chalice", "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    for stage in config["stages"].values():
        for queue, function in (("deliveries", "deliveries_worker"),
                                ("webhooks", "webhooks_worker"), ("inbound", "inbound_worker"),
                                ("bulk", "bulk_worker")):
            visibility = next(res["Properties"]["VisibilityTimeout"] for res in resources.values()
                              if res["Properties"].get("QueueName") ==
                              {"Fn::Sub": f"email-service-${{Stage}}-{queue}"})
            assert visibility >= 6 * stage["lambda_functions"][function]["lambda_timeout"]


def test_outputs_cover_every_placeholder_of_the_chalice_config():
    outputs = set(_template()["Outputs"])
    placeholders = set()
    for name in os.listdir(os.path.join(ROOT, ".chalice")):
        if name.endswith(".json"):
            with open(os.path.join(ROOT, ".chalice", name), encoding="utf-8") as fh:
                placeholders |= set(build.PLACEHOLDER.findall(fh.read()))
    assert placeholders and placeholders <= outputs, placeholders - outputs


def test_only_the_migrate_function_connects_as_the_owner():
    """Row-level security binds the service's role (DatabaseUser); the owner's URL and secret
    (DatabaseOwner*) reach the migrate function only, through its own IAM policy. The
    gateway connects as the service unless deploy.sh says its image predates the roles."""
    template = _template()
    outputs = template["Outputs"]
    assert outputs["DatabaseUser"]["Value"] != outputs["DatabaseOwnerUser"]["Value"]
    with open(os.path.join(ROOT, ".chalice", "config.json"), encoding="utf-8") as fh:
        stages = json.load(fh)["stages"]
    for stage in stages.values():
        assert stage["environment_variables"]["DATABASE_OWNER_URL"] == ""
        for name, function in stage["lambda_functions"].items():
            env = function.get("environment_variables", {})
            owner = "DATABASE_OWNER_SECRET_ARN" in env
            assert owner == (name == "migrate"), name
            assert ("${DatabaseOwnerUser}" in env.get("DATABASE_OWNER_URL", "")) == owner
            assert (function.get("iam_policy_file") == "policy-migrate.json") == owner
    for name in os.listdir(os.path.join(ROOT, ".chalice")):
        if name.startswith("policy"):
            with open(os.path.join(ROOT, ".chalice", name), encoding="utf-8") as fh:
                assert ("${DatabaseOwnerSecretArn}" in fh.read()) == (name == "policy-migrate.json")
    proxy = template["Resources"]["DatabaseProxy"]["Properties"]["Auth"]
    assert {"Ref": "ServiceDatabaseSecret"} in [a["SecretArn"] for a in proxy]
    gateway = template["Resources"]["GatewayTaskDefinition"]["Properties"][
        "ContainerDefinitions"][0]
    url = next(e for e in gateway["Environment"] if e["Name"] == "DATABASE_URL")["Value"]
    assert url["Fn::If"][0] == "GatewayAsService"
    assert "email_service_app@" in url["Fn::If"][1]["Fn::Sub"]


@contextlib.contextmanager
def _moto_account(monkeypatch):
    """A VPC with a private and a public subnet in moto, and ``outputs(probe, name, cidrs)``:
    the outputs of a stack of ``probe`` (a part of the template) made by moto's
    CloudFormation, with DeliverySubnetCidrA/B set to ``cidrs``."""
    moto = pytest.importorskip("moto")
    import boto3

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with moto.mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        private, public = (ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24")
                           ["Subnet"]["SubnetId"] for i in range(2))
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")

        def outputs(probe: dict, name: str, cidrs: tuple[str, str]) -> dict:
            values = {"Stage": "dev", "VpcId": vpc, "PrivateSubnetIds": private,
                      "PublicSubnetIds": public, "DeliverySubnetCidrA": cidrs[0],
                      "DeliverySubnetCidrB": cidrs[1], "GatewayImage": "x:1",
                      "SmtpHostname": "mx.example.com", "PublicUrl": "https://api.example.com"}
            cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(probe),
                                        Parameters=[{"ParameterKey": k, "ParameterValue": v}
                                                    for k, v in values.items()
                                                    if k in probe["Parameters"]])
            stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
            return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}

        yield types.SimpleNamespace(ec2=ec2, vpc=vpc, private=private, public=public,
                                    outputs=outputs)


def _delivery_network(template: dict) -> dict:
    return {name: res for name, res in template["Resources"].items()
            if name.startswith("Delivery") and res["Type"].startswith("AWS::EC2::")}


def test_the_deliveries_worker_sends_from_a_nat_gateways_elastic_ip(monkeypatch):
    """With DeliverySubnetCidrA/B the stack gives the deliveries worker subnets of its own
    whose only way out is a NAT gateway with an Elastic IP it allocates (the sending address
    AWS lifts port 25 for and gives reverse DNS); created here by moto's CloudFormation."""
    template = _template()
    for stage in json.load(open(os.path.join(ROOT, ".chalice", "config.json"),
                                encoding="utf-8"))["stages"].values():
        assert stage["lambda_functions"]["deliveries_worker"]["subnet_ids"] == \
            ["${DeliverySubnetIds}"]
    network = _delivery_network(template)
    assert {res["Condition"] for res in network.values()} == {"HasDeliveryEgress"}
    probe = json.loads(json.dumps(dict(template, Resources=network, Outputs={
        name: out for name, out in template["Outputs"].items() if name.startswith("Delivery")})))
    with _moto_account(monkeypatch) as account:
        ec2, vpc, private, public = account.ec2, account.vpc, account.private, account.public

        def outputs(name: str, cidrs: tuple[str, str]) -> dict:
            return account.outputs(probe, name, cidrs)

        # Without the CIDRs nothing is created and the worker keeps the private subnets.
        assert outputs("plain", ("", "")) == {"DeliverySubnetIds": private}
        made = outputs("egress", ("10.9.8.0/28", "10.9.8.16/28"))
        subnets = made["DeliverySubnetIds"].split(",")
        assert len(subnets) == 2 and private not in subnets
        [nat] = ec2.describe_nat_gateways(Filter=[{"Name": "vpc-id", "Values": [vpc]}])[
            "NatGateways"]
        assert nat["SubnetId"] == public
        assert nat["NatGatewayAddresses"][0]["PublicIp"] == made["DeliveryEgressIp"]
        assert nat["NatGatewayAddresses"][0]["AllocationId"] == made["DeliveryEgressAllocationId"]
        defaults = [route for table in ec2.describe_route_tables(Filters=[
            {"Name": "vpc-id", "Values": [vpc]}])["RouteTables"] for route in table["Routes"]
            if route.get("DestinationCidrBlock") == "0.0.0.0/0"]
        assert [route.get("NatGatewayId") for route in defaults] == [nat["NatGatewayId"]]
        # S3 (the content bucket) from the delivery subnets: the gateway endpoint, not the NAT
        [endpoint] = ec2.describe_vpc_endpoints(Filters=[
            {"Name": "vpc-id", "Values": [vpc]}])["VpcEndpoints"]
        assert endpoint["VpcEndpointType"] == "Gateway" and endpoint["ServiceName"].endswith(".s3")
    # That route's table is the delivery subnets' (moto's CloudFormation does not make
    # subnet associations, so read them from the template).
    associated = {res["Properties"]["SubnetId"]["Ref"] for res in network.values()
                  if res["Type"] == "AWS::EC2::SubnetRouteTableAssociation"
                  and res["Properties"]["RouteTableId"] == {"Ref": "DeliveryRouteTable"}}
    assert associated == {"DeliverySubnetA", "DeliverySubnetB"}
    assert network["DeliveryDefaultRoute"]["Properties"]["RouteTableId"] == \
        {"Ref": "DeliveryRouteTable"}


def test_the_content_bucket_is_private_encrypted_and_only_ours():
    """Issue 35: message content in S3 encrypted at rest, never public, TLS only; the
    functions' policies and the gateway tasks' role name that bucket alone; the gateway
    tasks use it (their filesystem is no place for content)."""
    template = _template()
    resources = template["Resources"]
    bucket = resources["ContentBucket"]["Properties"]
    [rule] = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert resources["ContentBucket"]["DeletionPolicy"] == "Retain"
    [deny] = resources["ContentBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"]["Bool"]["aws:SecureTransport"] == "false"
    assert template["Outputs"]["ContentBucket"]["Value"] == {"Ref": "ContentBucket"}
    for name in ("dev", "prod", "migrate"):
        with open(os.path.join(ROOT, ".chalice", f"policy-{name}.json"), encoding="utf-8") as fh:
            statements = json.load(fh)["Statement"]
        s3 = [st for st in statements if any(a.startswith("s3:") for a in st["Action"])]
        assert s3 and all("${ContentBucket}" in st["Resource"] for st in s3), name
    task = resources["GatewayTaskRole"]["Properties"]["Policies"]
    [content] = [p for p in task if p["PolicyName"] == "message-content"]
    [statement] = content["PolicyDocument"]["Statement"]
    assert "s3:DeleteObject" not in statement["Action"]
    assert statement["Resource"] == {"Fn::Sub": "${ContentBucket.Arn}/*"}
    [container] = resources["GatewayTaskDefinition"]["Properties"]["ContainerDefinitions"]
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env["CONTENT_STORE"] == "s3" and env["CONTENT_BUCKET"] == {"Ref": "ContentBucket"}
    for stage in json.load(open(os.path.join(ROOT, ".chalice", "config.json")))["stages"].values():
        assert stage["environment_variables"]["CONTENT_STORE"] == "s3"
        assert stage["environment_variables"]["CONTENT_BUCKET"] == "${ContentBucket}"


def test_the_stack_outputs_the_spf_records_to_publish(monkeypatch):
    """The return path's SPF record (the one each domain's check asks for, so the template
    and the service cannot disagree), and the SPF include naming the delivery address when
    the stack makes one; infra/deploy.sh prints both."""
    from chalicelib.config import load_settings
    from chalicelib.services.domains.records import return_path_spf

    template = _template()
    wanted = ("ReturnPathDomain", "ReturnPathSpfRecord", "SpfIncludeRecord")
    probe = json.loads(json.dumps(dict(template, Resources=_delivery_network(template), Outputs={
        name: template["Outputs"][name] for name in wanted})))
    record = return_path_spf(load_settings({"SMTP_HOSTNAME": "mx.example.com"}))
    with _moto_account(monkeypatch) as account:
        plain = account.outputs(probe, "plain", ("", ""))
        assert plain == {"ReturnPathDomain": "rp.mx.example.com",
                         "ReturnPathSpfRecord": f'{record["name"]} TXT "{record["value"]}"'}
        assert plain["ReturnPathSpfRecord"] == \
            'rp.mx.example.com TXT "v=spf1 include:spf.mx.example.com ~all"'
        egress = account.outputs(probe, "egress", ("10.9.8.0/28", "10.9.8.16/28"))
        [address] = [a["PublicIp"] for a in account.ec2.describe_addresses()["Addresses"]]
        assert egress["SpfIncludeRecord"] == f'spf.mx.example.com TXT "v=spf1 ip4:{address} ~all"'
    with open(os.path.join(INFRA, "deploy.sh"), encoding="utf-8") as fh:
        script = fh.read()
    assert "for output in ReturnPathSpfRecord SpfIncludeRecord; do" in script


def test_gateway_listens_on_25_465_587():
    resources = _template()["Resources"]
    ports = {res["Properties"]["Port"] for res in resources.values()
             if res["Type"] == "AWS::ElasticLoadBalancingV2::Listener"}
    assert ports == {25, 465, 587}
    lb = next(res for res in resources.values()
              if res["Type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer")
    assert lb["Properties"]["Type"] == "network"


def test_build_fills_placeholders_and_splits_lists(tmp_path):
    values = {"PrivateSubnetIds": "subnet-a,subnet-b", "DatabaseProxyEndpoint": "proxy.local"}
    missing: set[str] = set()
    result = build.substitute({"subnet_ids": ["${PrivateSubnetIds}"],
                               "url": "pg://u@${DatabaseProxyEndpoint}:5432/${Unknown}"},
                              values, missing)
    assert result == {"subnet_ids": ["subnet-a", "subnet-b"],
                      "url": "pg://u@proxy.local:5432/${Unknown}"}
    assert missing == {"Unknown"}
    lean = build.lambda_requirements("boto3==1.0\nSQLAlchemy==2.1.9\naiosmtpd==1.4.6\n")
    assert "\nSQLAlchemy==2.1.9\n" in lean and not re.search(r"^boto3", lean, re.M)


def test_build_packages_the_web_console(tmp_path):
    project = build.build(str(tmp_path / "project"))
    files = os.path.join(project, "chalicelib", "console_files")
    assert os.path.isfile(os.path.join(files, "index.html"))
    assert os.path.isfile(os.path.join(files, "assets", "pages", "server", "routes.js"))
    assert not os.path.exists(os.path.join(files, "node_modules"))
    # The packaged chalicelib/console/files.py finds them beside itself.
    found = subprocess.run([sys.executable, "-c", "from chalicelib.console import files; print(files.root())"],
                           cwd=project, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == files
    # The module the service writes for the console (not a file) is answered from the package.
    rules = subprocess.run([sys.executable, "-c", "from chalicelib.api import console; "
                            "print(console.asset2('generated', 'rules.js').status_code)"],
                           cwd=project, capture_output=True, text=True, check=True)
    assert rules.stdout.strip().splitlines()[-1] == "200"


def test_gateway_dockerfile():
    with open(os.path.join(ROOT, "smtp-gateway", "Dockerfile"), encoding="utf-8") as fh:
        text = re.sub(r"\\\n\s*", " ", fh.read())  # join continuation lines
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.startswith("#")]
    froms = [line.split()[1] for line in lines if line.upper().startswith("FROM ")]
    # Pinned base: an exact version tag or a digest, never latest or a bare major.
    assert froms and all(re.search(r"(@sha256:[0-9a-f]{64}|:\d+\.\d+\.\d+)", ref) for ref in froms)
    users = [line.split()[1] for line in lines if line.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert any(line.upper().startswith("HEALTHCHECK ") and "CMD" in line for line in lines)


def test_deploy_script_is_valid_bash():
    result = subprocess.run(["bash", "-n", os.path.join(INFRA, "deploy.sh")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_gateway_responses_match_the_merge_template():
    import gateway_responses

    class FakeApiGateway:  # records the calls boto3 would make
        def __init__(self):
            self.calls = []

        def put_gateway_response(self, **kwargs):
            self.calls.append(kwargs)

        def create_deployment(self, **kwargs):
            self.calls.append(("deploy", kwargs))

    client = FakeApiGateway()
    assert gateway_responses.apply(client, "abc123", "api") == len(client.calls) - 1
    missing = next(c for c in client.calls[:-1] if c["responseType"] == "MISSING_AUTHENTICATION_TOKEN")
    assert missing["statusCode"] == "404"
    assert client.calls[-1] == ("deploy", {"restApiId": "abc123", "stageName": "api"})


class TestSecretBootstrap:
    def test_fills_settings_from_secrets(self, tmp_path, monkeypatch):
        from chalicelib import aws_bootstrap

        monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
        secrets = {"arn:db": json.dumps({"username": "svc", "password": "p@ss/word"}),
                   "arn:key": "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----",
                   "arn:enc": "fernet-key", "arn:admin": "admin-key-0123456789"}
        env = {"DATABASE_URL": "postgresql+pg8000://svc@proxy:5432/email_service",
               "DATABASE_SECRET_ARN": "arn:db", "SIGNING_KEY_SECRET_ARN": "arn:key",
               "ENCRYPTION_KEY_SECRET_ARN": "arn:enc", "ADMIN_API_KEY_SECRET_ARN": "arn:admin"}
        filled = aws_bootstrap.load(env, fetch=secrets.__getitem__)
        assert set(filled) == {"DATABASE_URL", "SIGNING_KEY_PATH", "ENCRYPTION_KEY",
                               "ADMIN_API_KEY"}
        from sqlalchemy.engine import make_url

        url = make_url(env["DATABASE_URL"])
        assert (url.username, url.password, url.host) == ("svc", "p@ss/word", "proxy")
        assert env["ENCRYPTION_KEY"] == "fernet-key"
        assert oct(os.stat(env["SIGNING_KEY_PATH"]).st_mode & 0o777) == "0o600"
        with open(env["SIGNING_KEY_PATH"]) as fh:
            assert fh.read().startswith("-----BEGIN PRIVATE KEY-----")

    def test_the_migrate_function_gets_the_owner_too(self):
        """DATABASE_OWNER_SECRET_ARN (the migrate function's) fills DATABASE_OWNER_URL; the
        service's role stays in DATABASE_URL."""
        from sqlalchemy.engine import make_url

        from chalicelib import aws_bootstrap

        secrets = {"arn:app": json.dumps({"username": "email_service_app", "password": "a"}),
                   "arn:owner": json.dumps({"username": "email_service", "password": "o"})}
        env = {"DATABASE_URL": "postgresql+pg8000://x@proxy:5432/email_service",
               "DATABASE_SECRET_ARN": "arn:app",
               "DATABASE_OWNER_URL": "postgresql+pg8000://email_service@proxy:5432/email_service",
               "DATABASE_OWNER_SECRET_ARN": "arn:owner"}
        assert set(aws_bootstrap.load(env, fetch=secrets.__getitem__)) == {
            "DATABASE_URL", "DATABASE_OWNER_URL"}
        app, owner = make_url(env["DATABASE_URL"]), make_url(env["DATABASE_OWNER_URL"])
        assert (app.username, app.password) == ("email_service_app", "a")
        assert (owner.username, owner.password, owner.database) == ("email_service", "o",
                                                                    "email_service")

    def test_ecs_injected_values(self, tmp_path, monkeypatch):
        from chalicelib import aws_bootstrap

        monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
        env = {"DATABASE_URL": "postgresql+pg8000://svc@proxy/db", "DATABASE_PASSWORD": "s3cret",
               "SIGNING_KEY_PEM": "PEM"}
        assert aws_bootstrap.needed(env)
        aws_bootstrap.load(env, fetch=lambda arn: pytest.fail("no fetch expected"))
        assert "s3cret" in env["DATABASE_URL"] and "DATABASE_PASSWORD" not in env
        assert "SIGNING_KEY_PEM" not in env and os.path.exists(env["SIGNING_KEY_PATH"])

    def test_unknown_setting_is_refused(self):
        from chalicelib import aws_bootstrap

        with pytest.raises(ValueError, match="NOPE"):
            aws_bootstrap.load({"NOPE_SECRET_ARN": "arn:x"}, fetch=lambda arn: "v")

    def test_secrets_manager_through_moto(self, monkeypatch):
        moto = pytest.importorskip("moto")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        from chalicelib import aws_bootstrap

        with moto.mock_aws():
            import boto3

            arn = boto3.client("secretsmanager").create_secret(
                Name="email-service/test/encryption-key", SecretString="k1,k2")["ARN"]
            env = {"ENCRYPTION_KEY_SECRET_ARN": arn}
            assert aws_bootstrap.load(env) == ["ENCRYPTION_KEY"]
            assert env["ENCRYPTION_KEY"] == "k1,k2"


def test_a_generated_secret_that_starts_with_a_dash_is_stored(tmp_path):
    """deploy.sh's generate_secret_once, run by bash with the real aws CLI against a moto
    server: a url-safe ENCRYPTION_KEY starts with '-' once in 64 deploys, and without a
    space in it the CLI read it as an option of its own ('--secret-string: expected one
    argument'), which failed a rehearsal in CI."""
    moto_server = pytest.importorskip("moto.server")
    import boto3

    aws = os.path.join(os.path.dirname(sys.executable), "aws")
    if not os.path.exists(aws):
        pytest.skip("the aws CLI is not installed in this environment")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                   AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint,
                   PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
        client = boto3.client("secretsmanager", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        arn = client.create_secret(Name="enc", SecretString="PENDING-GENERATION")["ARN"]
        with open(os.path.join(INFRA, "deploy.sh")) as fh:
            script = fh.read()
        function = re.search(r"^generate_secret_once\(\) \{.*?^\}$", script, re.M | re.S)
        probe = tmp_path / "probe.sh"
        probe.write_text("set -euo pipefail\n"
                         "log() { printf '==> %s\\n' \"$*\"; }\n"
                         f"stack_output() {{ echo '{arn}'; }}\n"
                         + function.group(0) + "\n"
                         "generate_secret_once EncryptionKeySecretArn \"printf %s -q2w_e3r\"\n")
        result = subprocess.run(["bash", str(probe)], env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        assert client.get_secret_value(SecretId=arn)["SecretString"] == "-q2w_e3r"
    finally:
        server.stop()
