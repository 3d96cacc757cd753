"""Apply infra/gateway-responses.json to the REST API that `chalice deploy` created, so API
Gateway's own answers (unknown route, throttling, oversized body) use the envelope too.
(`chalice package --merge-template infra/gateway-responses.json` does the same for
CloudFormation-based deployments.)

    python infra/gateway_responses.py .chalice/deployed/<stage>.json [--stage-name api]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def rest_api_id(deployed_path: str) -> str:
    with open(deployed_path, encoding="utf-8") as fh:
        resources = json.load(fh)["resources"]
    return next(r["rest_api_id"] for r in resources if r.get("resource_type") == "rest_api")


def responses() -> list[dict]:
    with open(os.path.join(HERE, "gateway-responses.json"), encoding="utf-8") as fh:
        template = json.load(fh)
    return [res["Properties"] for res in template["Resources"].values()]


def apply(client, api_id: str, stage_name: str) -> int:
    for props in responses():
        kwargs = {"restApiId": api_id, "responseType": props["ResponseType"],
                  "responseParameters": props["ResponseParameters"],
                  "responseTemplates": props["ResponseTemplates"]}
        if props.get("StatusCode"):
            kwargs["statusCode"] = props["StatusCode"]
        client.put_gateway_response(**kwargs)
    # Gateway responses take effect with the next deployment of the stage.
    client.create_deployment(restApiId=api_id, stageName=stage_name)
    return len(responses())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deployed")
    parser.add_argument("--stage-name", default="api")
    args = parser.parse_args(argv)
    import boto3

    count = apply(boto3.client("apigateway"), rest_api_id(args.deployed), args.stage_name)
    print(f"{count} gateway responses applied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
