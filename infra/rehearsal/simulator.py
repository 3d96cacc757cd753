"""The simulated AWS of the rehearsal (a test tool): moto in server mode, with the Lambda
functions run by moto itself in docker (the runtime image of images.py, host network), and
three small changes to moto, each listed in the rehearsal's output:

* REST API import takes Chalice's document as API Gateway does: moto's import wants OpenAPI 3
  and an ``info.description``; Chalice sends Swagger 2.0 without one (the paths, methods
  and Lambda integrations, which is all moto reads, are the same in both);
* moto's in-line SQS trigger is off: it invokes the function once per record, synchronously
  inside the SendMessage call that added it, and never for a delayed or redelivered message.
  The rehearsal's poller (poller.py) runs the event source mappings instead, as Lambda's
  poller does: batches of the mapping's size, delete on success, redelivery after the
  visibility timeout, the queue's redrive policy to its dead-letter queue;
* a CloudFormation change set (what `aws cloudformation deploy` runs) updates the stack's
  outputs and parameters, as a stack created or updated directly does in moto;
* the volume moto fills with a function's code (named by the code's sha256) is kept while
  the simulator runs instead of being copied again for every invocation.

    python infra/rehearsal/simulator.py --port 5123 --image TAG
"""
from __future__ import annotations

import argparse
import os
import sys

PATCHES = (
    "REST API import accepts Chalice's Swagger 2.0 document (moto's wants OpenAPI 3)",
    "SQS event source mappings are run by the rehearsal's poller (moto's in-line trigger: "
    "one record per call, inside SendMessage, never for delayed or redelivered messages)",
    "an executed change set updates the stack's outputs and parameters (moto kept the old)",
    "a function's code volume is kept between invocations (moto copies it every time)",
)


def _accept_swagger() -> None:
    from moto.apigateway.models import APIGatewayBackend

    put, imported = APIGatewayBackend.put_rest_api, APIGatewayBackend.import_rest_api

    def as_openapi(doc: dict) -> dict:
        if str(doc.get("swagger", "")).startswith("2"):
            doc = {k: v for k, v in doc.items() if k != "swagger"}
            doc["openapi"] = "3.0.1"
        doc.setdefault("info", {}).setdefault("description", "")
        return doc

    def put_rest_api(self, function_id, api_doc, fail_on_warnings, mode="merge"):
        return put(self, function_id, as_openapi(api_doc), False, mode)

    def import_rest_api(self, api_doc, fail_on_warnings):
        return imported(self, as_openapi(api_doc), False)

    APIGatewayBackend.put_rest_api = put_rest_api
    APIGatewayBackend.import_rest_api = import_rest_api


def _no_inline_sqs_trigger() -> None:
    from moto.sqs.models import Queue

    # create_event_source_mapping registers the mapping on the queue, which add_message then
    # triggers; an attribute that always reads empty leaves the mapping in Lambda's list only.
    Queue.lambda_event_source_mappings = property(lambda self: {}, lambda self, value: None)


def _change_sets_update_outputs() -> None:
    from moto.cloudformation.models import ChangeSet

    apply = ChangeSet.apply

    def apply_then_outputs(self) -> None:
        apply(self)
        self.stack.template = self.template
        self.stack._parse_template()
        self.stack.parameters = self.parameters
        self.stack.output_map = self.stack._create_output_map()

    ChangeSet.apply = apply_then_outputs


def _keep_code_volumes() -> None:
    from moto.awslambda import models

    def exit_keeping(self, *exc) -> None:
        with self.__class__._lock:
            self._vol_ref.refcount -= 1

    models._DockerDataVolumeContext.__exit__ = exit_keeping


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--image", required=True, help="the Lambda runtime image (images.py)")
    args = parser.parse_args(argv)
    os.environ.update({"MOTO_PORT": str(args.port), "MOTO_DOCKER_LAMBDA_IMAGE": args.image,
                       "MOTO_DOCKER_NETWORK_MODE": "host"})
    _accept_swagger()
    _no_inline_sqs_trigger()
    _change_sets_update_outputs()
    _keep_code_volumes()
    from moto import server

    server.main(["--host", "127.0.0.1", "--port", str(args.port)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
