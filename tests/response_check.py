"""Every success answer of the running stack checked against the OpenAPI document: the JSON
a client receives must fit the response schema its operation declares (no field the schema
lacks, no missing required field, the declared types and formats). Installed on
``framework.response_check`` by the ``stack`` fixture, so every e2e test is also a
conformance test; a mismatch raises, and the request answers 500 with the reason logged."""
from __future__ import annotations

import json

import jsonschema_rs

from chalicelib.api import framework, openapi


class ResponseMismatch(AssertionError):
    pass


class ResponseChecker:
    def __init__(self) -> None:
        self.document = openapi.generate()
        self.paths = {id(info): path for path, info in openapi.route_table()}
        self.validators: dict[int, object] = {}
        self.checked = 0

    def validator(self, info: framework.EndpointInfo):
        found = self.validators.get(id(info))
        if found is None:
            path = self.paths[id(info)]
            operation = self.document["paths"][path][info.method.lower()]
            schema = operation["responses"][str(info.status)]["content"]["application/json"][
                "schema"]
            found = jsonschema_rs.validator_for(
                {**schema, "components": self.document["components"]}, validate_formats=True)
            self.validators[id(info)] = found
        return found

    def errors(self, info: framework.EndpointInfo, body: str) -> list[str]:
        instance = json.loads(body)
        return [f"{'/'.join(map(str, e.instance_path)) or '(root)'}: {e.message}"
                for e in self.validator(info).iter_errors(instance)]

    def __call__(self, info: framework.EndpointInfo, response) -> None:
        problems = self.errors(info, response.body)
        self.checked += 1
        if problems:
            raise ResponseMismatch(f"{info.method} {self.paths[id(info)]} answered outside its "
                                   "declared response schema: " + "; ".join(problems[:5]))
