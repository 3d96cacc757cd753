"""What Lambda's pollers and EventBridge do, which moto does not (a test tool).

* ``SqsPoller``: one thread per event source mapping read back from the simulator (queue,
  function, batch size): receives up to the batch size, invokes the function (moto runs it in
  docker) with the SQS event Lambda sends, deletes the batch when the invocation succeeded;
  when it failed the messages stay and come back once their visibility timeout is over, and
  the queue's redrive policy moves them to its dead-letter queue after maxReceiveCount
  receives (moto's SQS does that part). Time is scaled: a failed batch becomes visible again
  after ``visibility timeout x scale`` (ChangeMessageVisibility), not hours later.
* ``Scheduler``: each EventBridge rule with a ``rate(...)`` expression fires its target
  functions every ``rate x scale`` seconds, with the scheduled event EventBridge sends.
"""
from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field

RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")
UNIT = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass
class Stats:
    invocations: int = 0
    failures: int = 0
    records: int = 0
    redelivered: int = 0  # records received a second time or more
    log: list = field(default_factory=list)


class SqsPoller:
    def __init__(self, session_client, scale: float):
        self.lambda_client = session_client("lambda")
        self.sqs = session_client("sqs")
        self.scale = scale
        self.stats: dict[str, Stats] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def mappings(self) -> list[dict]:
        return self.lambda_client.list_event_source_mappings()["EventSourceMappings"]

    def start(self) -> "SqsPoller":
        for mapping in self.mappings():
            if mapping.get("State", "Enabled") not in ("Enabled", "Creating"):
                continue
            queue = mapping["EventSourceArn"].rsplit(":", 1)[-1]
            self.stats[queue] = Stats()
            thread = threading.Thread(target=self._poll, args=(mapping, queue), daemon=True,
                                      name=f"poll-{queue}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _poll(self, mapping: dict, queue: str) -> None:
        url = self.sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        visibility = int(self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"])
        stats = self.stats[queue]
        while not self._stop.is_set():
            try:
                received = self.sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=min(10, mapping["BatchSize"]),
                    WaitTimeSeconds=1, AttributeNames=["All"]).get("Messages", [])
            except Exception:  # noqa: BLE001  (the simulator is stopping)
                time.sleep(0.5)
                continue
            if received:
                self._invoke(mapping, queue, url, received, visibility, stats)

    def _invoke(self, mapping, queue, url, messages, visibility, stats: Stats) -> None:
        records = [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"], "attributes": m.get("Attributes", {}),
                    "messageAttributes": {}, "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs", "eventSourceARN": mapping["EventSourceArn"],
                    "awsRegion": "us-east-1"} for m in messages]
        stats.records += len(records)
        stats.redelivered += sum(int(m.get("Attributes", {}).get("ApproximateReceiveCount", 1)) > 1
                                 for m in messages)
        try:
            result = self.lambda_client.invoke(FunctionName=mapping["FunctionArn"],
                                               Payload=json.dumps({"Records": records}).encode())
            answer = result["Payload"].read().decode(errors="replace")
            ok = not result.get("FunctionError")
        except Exception as exc:  # noqa: BLE001  (moto answers 500 for a killed container)
            answer, ok = f"invocation failed: {exc}", False
        stats.invocations += 1
        stats.log.append((time.time(), [m["Body"] for m in messages], ok, answer[:200]))
        if ok:
            self.sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(messages)])
        else:
            stats.failures += 1
            later = max(1, int(visibility * self.scale))
            for m in messages:
                try:
                    self.sqs.change_message_visibility(QueueUrl=url,
                                                       ReceiptHandle=m["ReceiptHandle"],
                                                       VisibilityTimeout=later)
                except Exception:  # noqa: BLE001  (moved to the DLQ meanwhile)
                    pass


class Scheduler:
    def __init__(self, session_client, scale: float):
        self.events = session_client("events")
        self.lambda_client = session_client("lambda")
        self.scale = scale
        self.fired: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self._stop = threading.Event()

    def rules(self) -> list[tuple[str, float, list[str]]]:
        found = []
        for rule in self.events.list_rules()["Rules"]:
            match = RATE.fullmatch(rule.get("ScheduleExpression", ""))
            if not match or rule.get("State") != "ENABLED":
                continue
            seconds = int(match.group(1)) * UNIT[match.group(2).rstrip("s")]
            targets = [t["Arn"] for t in self.events.list_targets_by_rule(
                Rule=rule["Name"])["Targets"]]
            found.append((rule["Name"], seconds, targets))
        return found

    def start(self) -> "Scheduler":
        for name, seconds, targets in self.rules():
            threading.Thread(target=self._fire, args=(name, seconds * self.scale, targets),
                             daemon=True, name=f"rule-{name}").start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _fire(self, name: str, every: float, targets: list[str]) -> None:
        while not self._stop.wait(every):
            for arn in targets:
                event = {"version": "0", "id": str(uuid.uuid4()), "detail-type":
                         "Scheduled Event", "source": "aws.events", "account": "123456789012",
                         "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "region": "us-east-1", "resources": [f"rule/{name}"], "detail": {}}
                try:
                    result = self.lambda_client.invoke(FunctionName=arn,
                                                       Payload=json.dumps(event).encode())
                    result["Payload"].read()
                    bad = bool(result.get("FunctionError"))
                except Exception:  # noqa: BLE001  (the simulator is stopping)
                    bad = True
                key = arn.rsplit(":", 1)[-1]
                self.fired[key] = self.fired.get(key, 0) + 1
                self.failed[key] = self.failed.get(key, 0) + bad
