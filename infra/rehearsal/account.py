"""The simulated account the rehearsal deploys into, and the deploy itself (a test tool).

* ``Account.prepare``: what an infra team has before its first deploy (a VPC with subnets,
  the state bucket) and, made through the APIs because moto's CloudFormation cannot, the
  template's secrets (same names; GenerateSecretString generated here, as JSON when it has
  a SecretStringTemplate) and the RDS-managed database secret of the rehearsal's
  PostgreSQL (its user owns the tables); then the reduced template (stack.py) and the params
  file deploy.sh reads.
* ``release_tree``: a release's source in a temporary directory (``git archive`` of a commit,
  or the work tree's tracked and unignored files), with the rehearsal's settings written
  into its copy of .chalice/config.json as an operator would, listed in the output.
* ``Account.deploy``: runs that tree's infra/deploy.sh (this tree's, for a release whose own
  has no rehearsal switch) with every AWS call pointed at the simulator; ``outputs``
  replaces stack outputs for that deploy (a release from before the two database roles
  connects as the owner).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tarfile
import io

import stack

STAGE = "dev"
STATE_BUCKET = "email-service-rehearsal-state"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def aws_env(endpoint: str) -> dict[str, str]:
    """The environment of every AWS client of the rehearsal: the simulator, no real profile."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "rehearsal", "AWS_SECRET_ACCESS_KEY": "rehearsal",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_PAGER": ""})
    return env


class Account:
    def __init__(self, endpoint: str, work: str, database: dict, public_url: str):
        import boto3

        self.env = aws_env(endpoint)
        self.work, self.database, self.public_url = work, database, public_url
        self.session = boto3.Session(region_name="us-east-1", aws_access_key_id="rehearsal",
                                     aws_secret_access_key="rehearsal")
        self.endpoint = endpoint
        self.left_out: list[tuple[str, str, str]] = []
        self.secret_arns: dict[str, str] = {}

    def client(self, service: str):
        """A client of the simulator. Lambda's makes one attempt with a long read timeout:
        an Invoke is never repeated behind the caller's back (a killed invocation answers
        500 in moto, which botocore would otherwise retry, running the batch again)."""
        from botocore.config import Config

        config = Config(retries={"total_max_attempts": 1}, read_timeout=960,
                        connect_timeout=10) if service == "lambda" else None
        return self.session.client(service, endpoint_url=self.endpoint, config=config)

    def _secrets(self, template: dict) -> dict[str, str]:
        """The template's secrets, by resource name -> ARN, made through the API."""
        sm = self.client("secretsmanager")
        for name, res in template["Resources"].items():
            if res["Type"] != "AWS::SecretsManager::Secret":
                continue
            props = res["Properties"]
            value = props.get("SecretString") or secrets.token_urlsafe(36)[:48].replace("-", "a") \
                .replace("_", "b")
            generate = props.get("GenerateSecretString") or {}
            if "SecretStringTemplate" in generate:  # {"username": ...} + the generated key
                value = json.dumps(dict(json.loads(generate["SecretStringTemplate"]),
                                        **{generate["GenerateStringKey"]: value}))
            secret_name = props["Name"]["Fn::Sub"].replace("${Stage}", STAGE)
            self.secret_arns[name] = sm.create_secret(Name=secret_name, SecretString=value)["ARN"]
        db = self.database
        self.secret_arns["DatabaseMasterUserSecret"] = sm.create_secret(
            Name=f"rds!email-service-{STAGE}-rehearsal",
            SecretString=json.dumps({"username": db["user"], "password": db["password"]}))["ARN"]
        return self.secret_arns

    def prepare(self) -> None:
        ec2 = self.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
        subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{i}.0/24")["Subnet"]["SubnetId"]
                   for i in range(4)]
        # The private subnets' route table: the template adds the S3 gateway endpoint to it
        # (PrivateRouteTableIds; given explicitly: moto cannot update a stack whose
        # CommaDelimitedList parameter took its default).
        private_routes = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        self.client("s3").create_bucket(Bucket=STATE_BUCKET)
        template = stack.load()
        arns = self._secrets(template)
        params = {"VpcId": vpc, "PrivateSubnetIds": ",".join(subnets[:2]),
                  "PublicSubnetIds": ",".join(subnets[2:]), "SmtpHostname": "mx.rehearsal.test",
                  "PublicUrl": self.public_url, "FrontendUrl": "", "AlarmEmail": "",
                  "GatewayDesiredCount": "1", "PrivateRouteTableIds": private_routes}
        self.service_role = json.loads(self.secret("ServiceDatabaseSecret"))["username"]
        stand_ins = {
            "DatabaseProxyEndpoint": "127.0.0.2",  # dbproxy.py, TLS like RDS Proxy
            "DatabaseUser": self.service_role, "DatabaseName": self.database["name"],
            "DatabaseSecretArn": arns["ServiceDatabaseSecret"],
            "DatabaseOwnerUser": self.database["user"],
            "DatabaseOwnerSecretArn": arns["DatabaseMasterUserSecret"],
            "SigningKeySecretArn": arns["SigningKeySecret"],
            "EncryptionKeySecretArn": arns["EncryptionKeySecret"],
            "AdminApiKeySecretArn": arns["AdminApiKeySecret"],
        }
        reduced, self.left_out = stack.reduce(dict(params, Stage=STAGE, GatewayImage="x:1"),
                                              stand_ins, template)
        self.outputs = json.loads(json.dumps(reduced["Outputs"]))
        self.template_path = os.path.join(self.work, "template.json")
        with open(self.template_path, "w", encoding="utf-8") as fh:
            json.dump(reduced, fh, indent=1)
        self.params_path = os.path.join(self.work, f"params-{STAGE}.env")
        with open(self.params_path, "w", encoding="utf-8") as fh:
            fh.writelines(f"{k}={v}\n" for k, v in params.items())

    def secret(self, resource: str) -> str:
        return self.client("secretsmanager").get_secret_value(
            SecretId=self.secret_arns[resource])["SecretString"]

    def owner_outputs(self) -> dict[str, str]:
        """The stack outputs of a release from before the two roles: the service connects
        as the owner (the RDS master user) with its secret."""
        return {"DatabaseUser": self.database["user"],
                "DatabaseSecretArn": self.secret_arns["DatabaseMasterUserSecret"]}

    def deploy(self, tree: str, tag: str, build: str, log_path: str,
               outputs: dict[str, str] | None = None) -> None:
        """infra/deploy.sh of ``tree``, against the simulator, building in ``build``; its
        output goes to log_path. ``outputs``: stack outputs of this deploy that differ."""
        with open(self.template_path, encoding="utf-8") as fh:
            template = json.load(fh)
        for name, output in template["Outputs"].items():
            output["Value"] = (outputs or {}).get(name, self.outputs[name]["Value"])
        with open(self.template_path, "w", encoding="utf-8") as fh:
            json.dump(template, fh, indent=1)
        env = dict(self.env, STATE_BUCKET=STATE_BUCKET, REHEARSAL="1", RELEASE_TAG=tag,
                   BUILD_DIR=build,
                   GATEWAY_IMAGE_REPO="rehearsal.invalid/email-service-smtp",
                   INFRA_TEMPLATE=self.template_path, PARAMS_FILE=self.params_path,
                   PYTHON=os.path.join(ROOT, ".venv", "bin", "python"),
                   PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"])
        with open(log_path, "w", encoding="utf-8") as log:
            result = subprocess.run(["bash", os.path.join(tree, "infra", "deploy.sh"), STAGE],
                                    cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        if result.returncode:
            with open(log_path, encoding="utf-8") as fh:
                tail = fh.read()[-4000:]
            raise SystemExit(f"infra/deploy.sh failed ({log_path}):\n{tail}")


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], check=True, capture_output=True).stdout
    return [name for name in out.decode().split("\0") if name]


def release_tree(commit: str | None, into: str, settings: dict[str, str]) -> str:
    """The source of ``commit`` (None: the work tree) in ``into``, configured for the
    rehearsal: ``settings`` set in every stage's environment of .chalice/config.json."""
    os.makedirs(into)
    if commit:
        archive = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", commit],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
        # Its deploy.sh predates the rehearsal switch; the rest of the deploy path is its own.
        shutil.copy2(os.path.join(ROOT, "infra", "deploy.sh"), os.path.join(into, "infra"))
    else:
        for name in _tracked_files():
            if os.path.isfile(os.path.join(ROOT, name)):
                os.makedirs(os.path.join(into, os.path.dirname(name)), exist_ok=True)
                shutil.copy2(os.path.join(ROOT, name), os.path.join(into, name))
    path = os.path.join(into, ".chalice", "config.json")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    for stage in config["stages"].values():
        unknown = set(settings) - set(stage["environment_variables"])
        if unknown:
            raise SystemExit(f"not settings of the stage: {sorted(unknown)}")
        stage["environment_variables"].update(settings)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)
    return into
