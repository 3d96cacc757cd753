"""The rehearsal's scenario (a test tool): two deploys through infra/deploy.sh and what a
tenant does in between, against the deployed functions only (HTTP through front.py, queues
through poller.py, schedules through the Scheduler; each invocation a docker container moto
starts from the deployed zip).

1. deploy the previous release (first deploy: migrations right after `chalice deploy`);
2. as a tenant: organization, server, domain, credential, webhook; send over HTTP; the
   message arrives DKIM-signed at the local MX, the signed webhook at the local receiver,
   and it reads back through the API;
3. deploy this tree over it (migrations with the new code before the switch);
4. send again; the old and the new message both read back; the SMTP gateway, run from the
   deployed code, takes a message over SMTP;
5. a deliveries worker is killed mid-batch (its container, while the MX holds DATA): the
   batch comes back after the (scaled) visibility timeout and sends nothing twice.

With DELIVERY_RELAY set (as `make run` honours it), the deployment delivers there, not to the
rehearsal's MX: each message is then checked where it really went, by its delivery attempt
(Sent, the relay's 250, the attempt's host the relay), and the kill test, which needs an MX
that holds DATA on cue, is left out and said so.
"""
from __future__ import annotations

import json
import os
import signal
import smtplib
import ssl
import subprocess
import threading
import time

import requests

import account as acct
import verify
from checks import check, wait_for
from front import Front
from poller import Scheduler, SqsPoller

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCHEDULE_SCALE = float(os.environ.get("REHEARSE_SCHEDULE_SCALE", "0.25"))
VISIBILITY_SCALE = float(os.environ.get("REHEARSE_VISIBILITY_SCALE", str(1 / 540)))
DOMAIN = "acme.dev"  # the README's; reserved names (.test) are refused


class Rehearsal:
    def __init__(self, endpoint: str, work: str, database: dict, scale: float, serve: bool):
        from tests.mx import ScriptedMX
        from tests.receivers import Receiver
        from tests.support import free_port

        self.endpoint, self.work, self.database, self.serve = endpoint, work, database, serve
        self.mx = ScriptedMX().start()
        self.receiver = Receiver().start()
        self.front: Front | None = None
        self.front_port = free_port()
        self.account = acct.Account(endpoint, work, database, f"http://127.0.0.1:{self.front_port}")
        self.poller = self.scheduler = None
        self.gateway: subprocess.Popen | None = None
        self.gateway_port = free_port()
        # DELIVERY_RELAY as `make run` honours it: mail then goes there, not to self.mx.
        self.relay = (os.environ.get("DELIVERY_RELAY") or "").strip()
        self.settings = {
            "DELIVERY_RELAY": self.relay or self.mx.relay,
            "WEBHOOKS_ALLOW_PRIVATE_TARGETS":
                os.environ.get("WEBHOOKS_ALLOW_PRIVATE_TARGETS") or "true",
            "DOMAIN_VERIFY_DNS": "false",  # no DNS to publish the verification record in
        }
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------ deploys
    def _deploy(self, name: str, tree: str, tag: str, outputs: dict | None = None) -> str:
        started = time.monotonic()
        build = os.path.join(self.work, f"build-{name}")
        self.account.deploy(tree, tag, build, os.path.join(self.work, f"deploy-{name}.log"),
                            outputs)
        self.timings[f"deploy {name}"] = time.monotonic() - started
        apigateway = self.account.client("apigateway")
        api = next(a for a in apigateway.get_rest_apis()["items"] if a["name"] == "email-service")
        self.front.use(apigateway, api["id"])
        print(f"  deployed {name} ({tag}) in {self.timings[f'deploy {name}']:.0f} s; "
              f"REST API {api['id']}: {len(self.front.routes)} resources served at {self.front.url}")
        return build

    def everything(self, proxy) -> None:
        acct_ = self.account
        print("\n==> the account: VPC, state bucket, secrets; what moto's CloudFormation can "
              "create of infra/template.yaml", flush=True)
        acct_.prepare()
        self.front = Front(acct_.client("lambda"), self.front_port).start()
        with open(os.path.join(HERE, "PREVIOUS_RELEASE"), encoding="utf-8") as fh:
            previous_commit = fh.read().split()[0]
        for key, value in self.settings.items():
            print(f"  setting in the rehearsal's copy of .chalice/config.json: {key}={value}")
        previous = acct.release_tree(previous_commit, os.path.join(self.work, "previous"),
                                     self.settings)
        current = acct.release_tree(None, os.path.join(self.work, "current"), self.settings)

        print(f"\n==> infra/deploy.sh: the previous release {previous_commit} (first deploy)",
              flush=True)
        # That release predates the two database roles: it connects as the owner.
        build_previous = self._deploy("previous", previous, previous_commit,
                                      acct_.owner_outputs())
        verify.deployed_code(acct_, build_previous, "previous")
        self.poller = SqsPoller(acct_.client, VISIBILITY_SCALE).start()
        self.scheduler = Scheduler(acct_.client, SCHEDULE_SCALE).start()
        print(f"  polling {len(self.poller.stats)} event source mappings; "
              f"{len(self.scheduler.rules())} schedules every rate x {SCHEDULE_SCALE}")

        print("\n==> the tenant, on the previous release", flush=True)
        self.admin_key = acct_.secret("AdminApiKeySecret")
        check(self.api("GET", "/health").status_code == 200, "GET /health answers 200")
        self.tenant()
        first = self.send_and_follow("before-upgrade")

        print("\n==> infra/deploy.sh: this tree over it (migrations before the switch)",
              flush=True)
        build_current = self._deploy("current", current, "current")
        verify.migrated_before_switch(os.path.join(self.work, "deploy-current.log"))
        verify.deployed_code(acct_, build_current, "current")
        verify.service_role(self.database, acct_.service_role)

        print("\n==> the tenant, on this tree", flush=True)
        second = self.send_and_follow("after-upgrade")
        for message_id in (first, second):
            shown = self.server_api("GET", f"/api/v2/server/messages/{message_id}").json()
            check(shown["data"]["message"]["status"] == "Sent",
                  f"message {message_id} reads back Sent after the upgrade")
        self.content_backfill(first, second)
        self.start_gateway(build_current, current)
        self.smtp_send()
        if self.relay:
            self.kill_skipped = (f"left out: DELIVERY_RELAY={self.relay} delivers to your relay, "
                                 "and the kill test needs the rehearsal's MX to hold DATA")
            print(f"\n==> kill mid-batch {self.kill_skipped}", flush=True)
        else:
            self.kill_mid_batch()
        self.report(proxy)

    def content_bucket(self) -> str:
        """The template's content bucket, as moto's CloudFormation named it."""
        return next(b["Name"] for b in self.account.client("s3").list_buckets()["Buckets"]
                    if b["Name"].startswith(f"email-service-{acct.STAGE}-content-"))

    def content_backfill(self, before: int, after: int) -> None:
        """Issue 35: the message written on the previous release keeps its bytes in the
        database; the backfill (the migrate function, as an operator runs it after the
        upgrade) moves them into the content bucket on moto's S3, and the message's raw
        source reads back the same through the API; the one sent on this tree was stored
        there from the start."""
        import base64

        print("\n==> the content backfill on moto's S3", flush=True)

        def raw(message_id: int) -> bytes:
            answer = self.server_api("GET", f"/api/v2/server/messages/{message_id}/raw")
            check(answer.status_code == 200, f"GET .../messages/{message_id}/raw answers 200")
            return base64.b64decode(answer.json()["data"]["raw_base64"])

        earlier = raw(before)
        s3 = self.account.client("s3")
        bucket = self.content_bucket()
        stored = s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0)
        check(stored >= 2, f"the message sent on this tree is in the bucket ({stored} objects)")
        result = self.account.client("lambda").invoke(
            FunctionName=f"email-service-{acct.STAGE}-migrate",
            Payload=json.dumps({"content_backfill": True}).encode())
        report = json.loads(result["Payload"].read())
        print(f"  backfill: {report}")
        check(isinstance(report, dict) and report.get("left") == 0 and report.get("moved", 0) >= 2,
              "the backfill moved the previous release's content and left none behind")
        moved = s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0)
        check(moved >= stored + 2, f"the moved content is in the bucket ({moved} objects)")
        check(raw(before) == earlier and b"DKIM-Signature:" in earlier,
              f"message {before} (sent before the upgrade) reads back the same from S3")
        check(b"DKIM-Signature:" in raw(after), f"message {after} reads back from S3")

    # ------------------------------------------------------------------ HTTP
    def api(self, method: str, path: str, body=None, headers=None) -> requests.Response:
        return requests.request(method, self.front.url + path, json=body, timeout=120,
                                headers=headers or {})

    def admin(self, method: str, path: str, body=None):
        response = self.api(method, path, body, {"X-Admin-API-Key": self.admin_key})
        if response.status_code >= 300:
            raise SystemExit(f"rehearsal failed: {method} {path}: {response.status_code} "
                             f"{response.text[:500]}")
        return response.json()["data"]

    def server_api(self, method: str, path: str, body=None) -> requests.Response:
        return self.api(method, path, body, {"X-Server-API-Key": self.api_key})

    def tenant(self) -> None:
        org = self.admin("POST", "/api/v2/admin/organizations", {"name": "Acme"})
        org = org["organization"]["permalink"]
        srv = self.admin("POST", f"/api/v2/admin/organizations/{org}/servers", {"name": "Main"})
        self.server_path = f"/api/v2/admin/organizations/{org}/servers/" \
                           f"{srv['server']['permalink']}"
        self.admin("POST", f"{self.server_path}/domains", {"name": DOMAIN})
        self.admin("POST", f"{self.server_path}/domains/{DOMAIN}/verify")
        self.api_key = self.admin("POST", f"{self.server_path}/credentials",
                                  {"type": "API", "name": "app"})["credential"]["key"]
        self.smtp_key = self.admin("POST", f"{self.server_path}/credentials",
                                   {"type": "SMTP", "name": "smtp"})["credential"]["key"]
        self.admin("POST", f"{self.server_path}/webhooks",
                   {"name": "all", "url": self.receiver.url, "events": []})
        check(True, "organization, server, domain (verified), API and SMTP credentials and a "
                    "webhook created through the API")

    def send_and_follow(self, label: str) -> int:
        to = f"{label}@example.net"
        response = self.server_api("POST", "/api/v2/server/messages", {
            "from": f"App <app@{DOMAIN}>", "to": [to], "subject": f"Rehearsal {label}",
            "text_body": f"Hello from the {label} deploy"})
        check(response.status_code in (200, 201), f"send over HTTP accepted ({label})")
        message_id = response.json()["data"]["recipients"][0]["id"]
        status = wait_for(lambda: (s := self.server_api(
            "GET", f"/api/v2/server/messages/{message_id}").json()["data"]["message"]["status"])
            != "Pending" and s, 120, f"delivery of message {message_id}")
        check(status == "Sent", f"message {message_id} is Sent ({label})")
        self.delivered(message_id, to)
        hook = wait_for(lambda: [r for r in list(self.receiver.requests)
                                 if r.json().get("payload", {}).get("message", {}).get("id")
                                 == message_id], 120, f"the webhook of message {message_id}")[0]
        check(self.webhook_ok(hook), f"its {hook.json()['event']} webhook arrived, signed with "
                                     "the installation key")
        return message_id

    def delivered(self, message_id: int, to: str) -> None:
        """Where the deployment delivers: the rehearsal's MX (DKIM-checked there), or the
        DELIVERY_RELAY given, read from the message's delivery attempt (the relay's reply)."""
        if not self.relay:
            [received] = wait_for(lambda: self.mx.received_for(to), 30, f"mail for {to} at the MX")
            check(self.dkim_ok(received.data), f"the MX received it DKIM-signed d={DOMAIN}")
            return
        attempts = self.server_api(
            "GET", f"/api/v2/server/messages/{message_id}/deliveries").json()["data"]["deliveries"]
        last = attempts[-1] if attempts else {}
        relay_host = self.relay.rsplit(":", 1)[0].strip("[]")
        check(last.get("status") == "Sent" and last.get("code") == 250
              and relay_host in (last.get("host") or ""),
              f"message {message_id} was handed to DELIVERY_RELAY {self.relay} (attempt: host "
              f"{last.get('host')}, code {last.get('code')}; the rehearsal's MX is not used, so "
              "DKIM is checked there only without a relay)")

    def dkim_ok(self, data: bytes) -> bool:
        import dkim

        domain = self.admin("GET", f"{self.server_path}/domains/{DOMAIN}")["domain"]
        record = domain["dns_records"]["dkim"]

        def dnsfunc(name, timeout=5):
            name = name.decode() if isinstance(name, bytes) else name
            return record["value"].encode() if name.rstrip(".") == record["name"] else None

        return bool(dkim.verify(data, dnsfunc=dnsfunc))

    def webhook_ok(self, hook) -> bool:
        from cryptography.hazmat.primitives import serialization

        from client.email_service_client import verify_webhook_signature

        key = serialization.load_pem_private_key(
            self.account.secret("SigningKeySecret").encode(), None)
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
        return verify_webhook_signature(hook.body, hook.headers.get("x-service-signature"),
                                        public.decode())

    # ------------------------------------------------------------------ SMTP gateway
    def start_gateway(self, build: str, tree: str) -> None:
        """The gateway as its ECS task runs it: the deployed code (the zip's chalicelib) and
        the release's smtp-gateway/server.py, with the task definition's environment."""
        import zipfile

        app = os.path.join(self.work, "gateway-app")
        with zipfile.ZipFile(os.path.join(build, "package", "deployment.zip")) as archive:
            archive.extractall(app)
        os.makedirs(os.path.join(app, "smtp-gateway"))
        subprocess.run(["cp", os.path.join(tree, "smtp-gateway", "server.py"),
                        os.path.join(app, "smtp-gateway")], check=True)
        db = self.database
        service = json.loads(self.account.secret("ServiceDatabaseSecret"))  # as the task's
        env = {"DATABASE_URL": f"postgresql+pg8000://{service['username']}@127.0.0.2:5432/"
                               f"{db['name']}",
               "DATABASE_SSL": "verify", "QUEUE_BACKEND": "sqs",
               "SQS_QUEUE_PREFIX": "email-service-dev-", "SMTP_HOSTNAME": "mx.rehearsal.test",
               "CONTENT_STORE": "s3", "CONTENT_BUCKET": self.content_bucket(),
               "PUBLIC_URL": self.front.url, "AWS_DEFAULT_REGION": "us-east-1",
               "LOG_FORMAT": "json", "METRICS_BACKEND": "emf",
               "POWERTOOLS_SERVICE_NAME": "email-service-dev", "HOST": "127.0.0.1",
               "SMTP_PORT": str(self.gateway_port), "SMTP_SUBMISSION_PORTS": "",
               "SMTP_TLS_PORT": "0", "PYTHONPATH": "/var/runtime:/var/gateway",
               "SIGNING_KEY_PATH": "/tmp/signing_key.pem",
               "DATABASE_PASSWORD": service["password"],
               "SIGNING_KEY_PEM": self.account.secret("SigningKeySecret"),
               "ENCRYPTION_KEY": self.account.secret("EncryptionKeySecret"),
               "AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "rehearsal",
               "AWS_SECRET_ACCESS_KEY": "rehearsal"}
        args = ["docker", "run", "--rm", "--name", f"rehearsal-gateway-{self.gateway_port}",
                "--network", "host", "--read-only", "--tmpfs", "/tmp",
                "-v", f"{app}:/app:ro", "-w", "/app", "--entrypoint", "/usr/bin/python3"]
        for name, value in env.items():
            args += ["-e", f"{name}={value}"]
        log = open(os.path.join(self.work, "gateway.log"), "w")
        self.gateway = subprocess.Popen(args + [images_tag(), "-B", "smtp-gateway/server.py"],
                                        stdout=log, stderr=log)
        wait_for(lambda: self._smtp_up(), 60, "the SMTP gateway's greeting")
        check(True, f"the SMTP gateway (deployed code, clean Python) listens on "
                    f"127.0.0.1:{self.gateway_port}")

    def _smtp_up(self) -> bool:
        try:
            with smtplib.SMTP("127.0.0.1", self.gateway_port, timeout=5) as client:
                return client.noop()[0] == 250
        except OSError:
            return False

    def smtp_send(self) -> None:
        to = "over-smtp@example.net"
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with smtplib.SMTP("127.0.0.1", self.gateway_port, timeout=30) as client:
            client.starttls(context=context)
            client.login("any-user", self.smtp_key)
            client.sendmail(f"app@{DOMAIN}", [to], (
                f"From: App <app@{DOMAIN}>\r\nTo: {to}\r\nSubject: Over SMTP\r\n\r\n"
                "Hello over SMTP\r\n").encode())
        if not self.relay:
            [received] = wait_for(lambda: self.mx.received_for(to), 120,
                                  "the SMTP message at the MX")
            check(self.dkim_ok(received.data), "a message taken by the gateway over SMTP was "
                                               "delivered DKIM-signed")
            return

        def sent() -> int | None:
            found = self.server_api("GET", f"/api/v2/server/messages?query={to}").json()
            return next((m["id"] for m in found["data"]["messages"]
                         if m["status"] == "Sent"), None)

        message_id = wait_for(sent, 120, "the SMTP message Sent")
        self.delivered(message_id, to)

    # ------------------------------------------------------------------ kill mid-batch
    def _worker_container(self) -> str | None:
        ids = subprocess.run(["docker", "ps", "-q"], capture_output=True, text=True).stdout
        for cid in ids.split():
            env = subprocess.run(["docker", "inspect", "--format",
                                  "{{range .Config.Env}}{{println .}}{{end}}", cid],
                                 capture_output=True, text=True).stdout
            if "AWS_LAMBDA_FUNCTION_NAME=email-service-dev-deliveries_worker" in env:
                return cid
        return None

    def kill_mid_batch(self) -> None:
        stats = self.poller.stats["email-service-dev-deliveries"]
        failures_before, redelivered_before = stats.failures, stats.redelivered
        arrived, release = self.mx.hold_next_data()
        recipients = [f"batch-{i}@example.net" for i in range(3)]
        response = self.server_api("POST", "/api/v2/server/messages", {
            "from": f"App <app@{DOMAIN}>", "to": recipients, "subject": "Batch",
            "text_body": "One batch, one kill"})
        check(response.status_code in (200, 201), "three messages accepted in one request")
        wait_for(arrived.is_set, 120, "the held DATA at the MX")
        container = wait_for(self._worker_container, 30, "the deliveries worker's container")
        subprocess.run(["docker", "kill", container], check=True, capture_output=True)
        release.set()
        check(True, f"deliveries worker killed mid-batch (container {container[:12]}, DATA held)")
        wait_for(lambda: stats.failures > failures_before, 60, "the failed invocation")
        wait_for(lambda: stats.redelivered > redelivered_before, 120,
                 "the batch's redelivery after the visibility timeout")
        wait_for(lambda: stats.invocations and stats.log[-1][2], 120,
                 "a successful invocation of the redelivered batch")
        time.sleep(5)
        counts = {to: len(self.mx.received_for(to)) for to in recipients}
        check(all(n <= 1 for n in counts.values()),
              f"the redelivered batch sent nothing twice (MX copies per recipient: "
              f"{sorted(counts.values())})")
        self.kill_counts = counts

    # ------------------------------------------------------------------ report, serve
    def report(self, proxy) -> None:
        print("\n==> report", flush=True)
        created = verify.created(self.account)
        for line in created:
            print(f"  created: {line}")
        for name, kind, why in self.account.left_out:
            print(f"  NOT created (simulator): {name} ({kind}): {why}")
        print("  stood in by the rehearsal: RDS DBInstance + DBProxy -> PostgreSQL behind "
              "dbproxy.py (TLS verified); ECS service + NLB -> the gateway container on "
              "loopback; API Gateway's HTTP -> front.py; Lambda's SQS poller and "
              "EventBridge's schedules -> poller.py")
        for queue, stats in sorted(self.poller.stats.items()):
            print(f"  {queue}: {stats.invocations} invocations, {stats.records} records, "
                  f"{stats.failures} failed, {stats.redelivered} redelivered")
        for name, count in sorted(self.scheduler.fired.items()):
            print(f"  schedule {name}: fired {count}x, {self.scheduler.failed.get(name, 0)} failed")
        if getattr(self, "kill_skipped", None):
            print(f"  kill mid-batch {self.kill_skipped}")
        print(f"  HTTP requests through the front: {self.front.requests}; database proxy "
              f"refused {proxy.refused} plain connections")

    def serve_forever(self) -> None:
        print(f"API_URL={self.front.url} SMTP_HOST=127.0.0.1 SMTP_PORT={self.gateway_port} "
              f"ADMIN_API_KEY={self.admin_key}", flush=True)
        stopped = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stopped.set())
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        stopped.wait()

    def stop(self) -> None:
        for part in (self.scheduler, self.poller):
            if part is not None:
                part.stop()
        if self.gateway is not None:
            subprocess.run(["docker", "kill", f"rehearsal-gateway-{self.gateway_port}"],
                           capture_output=True)
        if self.front is not None:
            self.front.stop()
        self.mx.stop()
        self.receiver.stop()


def images_tag() -> str:
    import images

    return images.runtime_tag()
