"""What API Gateway does in front of the API function, which moto does not (a test tool): an
HTTP server on loopback that matches each request against the deployed REST API's resources
(read back from the simulator: paths, methods, the Lambda integration's function), turns it
into the proxy event API Gateway sends (resource, path parameters, query strings, headers,
request context, body; base64 for binary bodies) and invokes that function through the
simulator's Lambda Invoke (moto runs it in docker). The function's answer becomes the HTTP
response. A path no resource matches gets the REST API's MISSING_AUTHENTICATION_TOKEN gateway
response, as API Gateway answers it (infra/gateway_responses.py sets it to the 404 envelope).
"""
from __future__ import annotations

import base64
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

TEXT = re.compile(r"^(text/|application/(json|x-www-form-urlencoded|xml|javascript))")


class Route:
    def __init__(self, path: str, methods: dict[str, str]):
        self.path, self.methods = path, methods  # method -> function ARN
        pattern = re.sub(r"\\\{(\w+)\\\+\\\}", r"(?P<\1>.+)", re.escape(path))
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", pattern)
        self.regex = re.compile(f"^{pattern}$")
        self.literal = path.count("{") == 0


def load_routes(apigateway, api_id: str) -> list[Route]:
    routes = []
    for page in apigateway.get_paginator("get_resources").paginate(restApiId=api_id,
                                                                    embed=["methods"]):
        for res in page["items"]:
            methods = {}
            for verb in res.get("resourceMethods", {}):
                integration = apigateway.get_integration(restApiId=api_id, resourceId=res["id"],
                                                         httpMethod=verb)
                # arn:aws:apigateway:{region}:lambda:path/2015-03-31/functions/{arn}/invocations
                methods[verb] = integration["uri"].split("/functions/")[1].split("/invocations")[0]
            if methods:
                routes.append(Route(res["path"], methods))
    # Literal paths before templated ones, as API Gateway prefers the most specific match.
    return sorted(routes, key=lambda r: (not r.literal, -len(r.path)))


class Front:
    def __init__(self, lambda_client, port: int, stage: str = "api"):
        self.lambda_client, self.port, self.stage = lambda_client, port, stage
        self.routes: list[Route] = []
        self.not_found: dict | None = None
        self.api_id = ""
        self.requests = 0
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self):
                front.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, payload = front.answer(self.command, self.path, self.headers,
                                                        body, self.client_address[0])
                self.send_response(status)
                for name, values in headers.items():
                    for value in values:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _handle

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def use(self, apigateway, api_id: str) -> None:
        """Serve the REST API ``api_id`` (again after each deploy: routes may change)."""
        self.api_id = api_id
        self.routes = load_routes(apigateway, api_id)
        self.not_found = next((r for r in apigateway.get_gateway_responses(
            restApiId=api_id)["items"] if r["responseType"] == "MISSING_AUTHENTICATION_TOKEN"),
            None)

    def start(self) -> "Front":
        threading.Thread(target=self._server.serve_forever, daemon=True, name="front").start()
        return self

    def stop(self) -> None:
        self._server.shutdown()

    def _match(self, path: str):
        for route in self.routes:
            found = route.regex.match(path)
            if found:
                return route, found.groupdict()
        return None, None

    def event(self, method, route, params, path, query, headers, body, source_ip) -> dict:
        single = {k: v[-1] for k, v in query.items()}
        content_type = headers.get("Content-Type", "")
        binary = bool(body) and not TEXT.match(content_type)
        return {
            "resource": route.path, "path": path, "httpMethod": method,
            "headers": dict(headers.items()),
            "multiValueHeaders": {k: headers.get_all(k) for k in set(headers.keys())},
            "queryStringParameters": single or None,
            "multiValueQueryStringParameters": query or None,
            "pathParameters": params or None, "stageVariables": None,
            "requestContext": {"resourcePath": route.path, "httpMethod": method,
                               "path": f"/{self.stage}{path}", "stage": self.stage,
                               "requestId": str(uuid.uuid4()), "apiId": self.api_id,
                               "accountId": "123456789012", "requestTimeEpoch":
                               int(time.time() * 1000), "identity": {"sourceIp": source_ip}},
            "body": (base64.b64encode(body).decode() if binary else body.decode()) if body
            else None,
            "isBase64Encoded": binary,
        }

    def answer(self, method, raw_path, headers, body, source_ip):
        split = urlsplit(raw_path)
        route, params = self._match(split.path)
        if route is None or method not in route.methods:
            return self._gateway_response(method, split.path)
        event = self.event(method, route, params, split.path,
                           parse_qs(split.query, keep_blank_values=True), headers, body,
                           source_ip)
        result = self.lambda_client.invoke(FunctionName=route.methods[method],
                                           Payload=json.dumps(event).encode())
        payload = json.loads(result["Payload"].read() or b"null")
        if result.get("FunctionError") or not isinstance(payload, dict) \
                or "statusCode" not in payload:
            return 502, {"Content-Type": ["application/json"]}, \
                b'{"message": "Internal server error"}'
        out_headers = {k: [v] for k, v in (payload.get("headers") or {}).items()}
        for k, values in (payload.get("multiValueHeaders") or {}).items():
            out_headers[k] = values
        data = payload.get("body") or ""
        data = base64.b64decode(data) if payload.get("isBase64Encoded") else data.encode()
        return int(payload["statusCode"]), out_headers, data

    def _gateway_response(self, method: str, path: str):
        response = self.not_found or {"statusCode": "403", "responseTemplates": {
            "application/json": '{"message":"Missing Authentication Token"}'}}
        template = response.get("responseTemplates", {}).get("application/json", "")
        text = template.replace("$context.httpMethod", method).replace("$context.path", path)
        headers = {"Content-Type": ["application/json"]}
        for name, value in (response.get("responseParameters") or {}).items():
            headers[name.rsplit(".", 1)[-1]] = [value.strip("'")]
        return int(response.get("statusCode") or 403), headers, text.encode()
