"""Helpers shared by the tests: a small HTTP client for the three surfaces, free ports, and
a tenant factory that sets an organization up through the management API."""
from __future__ import annotations

import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, message: str = "condition"):
    """Poll until ``predicate()`` is truthy; returns its value. Never asserts on time: the
    timeout only bounds how long a broken test hangs."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)


class Api:
    """requests against the running stack; ``admin_key``/``server_key`` pick the credential."""

    def __init__(self, base_url: str, admin_key: str | None = None):
        self.base_url = base_url
        self.admin_key = admin_key
        self.http = requests.Session()

    def request(self, method: str, path: str, *, json=None, data=None, headers=None,
                admin_key: str | None = None, server_key: str | None = None,
                bearer: str | None = None, **kwargs) -> requests.Response:
        hdrs = dict(headers or {})
        if server_key is not None:
            hdrs["X-Server-API-Key"] = server_key
        elif bearer is not None:
            hdrs["Authorization"] = f"Bearer {bearer}"
        elif path.startswith("/api/v2/admin") and (admin_key or self.admin_key) and \
                admin_key != "":
            hdrs["X-Admin-API-Key"] = admin_key or self.admin_key
        return self.http.request(method, self.base_url + path, json=json, data=data,
                                 headers=hdrs, timeout=30, **kwargs)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json=None, **kw):
        return self.request("POST", path, json=json if json is not None else {}, **kw)

    def patch(self, path, json=None, **kw):
        return self.request("PATCH", path, json=json if json is not None else {}, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    @staticmethod
    def data(response: requests.Response, status: int | None = None) -> dict:
        body = response.json()
        if status is not None:
            assert response.status_code == status, (response.status_code, body)
        assert body["status"] == "success", body
        return body["data"]

    @staticmethod
    def error(response: requests.Response, status: int, code: str) -> dict:
        body = response.json()
        assert response.status_code == status, (response.status_code, body)
        assert body["status"] == "error" and body["error"]["code"] == code, body
        assert isinstance(body["time"], (int, float))
        return body["error"]


@dataclass
class Tenant:
    org: str
    server: str
    domain: str
    api_key: str
    smtp_key: str

    @property
    def server_path(self) -> str:
        return f"/api/v2/admin/organizations/{self.org}/servers/{self.server}"


def make_tenant(api: Api, *, verified: bool = True, domain: str | None = None) -> Tenant:
    org = Api.data(api.post("/api/v2/admin/organizations", {"name": unique("Org")}), 201)
    org_permalink = org["organization"]["permalink"]
    srv = Api.data(api.post(f"/api/v2/admin/organizations/{org_permalink}/servers",
                            {"name": "Main"}), 201)["server"]["permalink"]
    base = f"/api/v2/admin/organizations/{org_permalink}/servers/{srv}"
    domain_name = domain or f"{unique('d')}.example.com"
    Api.data(api.post(base + "/domains", {"name": domain_name}), 201)
    if verified:
        Api.data(api.post(base + f"/domains/{domain_name}/verify"))
    api_key = Api.data(api.post(base + "/credentials", {"type": "API", "name": "api"}),
                       201)["credential"]["key"]
    smtp_key = Api.data(api.post(base + "/credentials", {"type": "SMTP", "name": "smtp"}),
                        201)["credential"]["key"]
    return Tenant(org_permalink, srv, domain_name, api_key, smtp_key)


@contextmanager
def all_tenants():
    """A session of the service's role (committed on success) that sees every tenant's
    rows, as an instance admin does (db/tenancy.py): how tests set up and inspect rows
    directly. On PostgreSQL a plain session_scope() acts for nobody and reads no tenant's
    rows."""
    from chalicelib.db import session_scope, tenancy

    with session_scope() as db:
        tenancy.act(db, tenancy.instance_admin())
        yield db


@contextmanager
def sweeps_held(timeout: float = 60.0):
    """The in-process stack's sweeper held between two sweeps for the block: for a test that
    puts a due row in place and must be the only one to sweep or wake it. The sweeper's
    thread calls ``sweeper.sweep`` once per round; the stand-in put in its place waits for
    the block to end. The block starts only once the stand-in has been called (so a sweep
    that was under way when it was put in place has finished), and the real one is back
    afterwards. Inside the block ``sweeper.sweep`` is the stand-in: a test that sweeps
    itself does so after the block."""
    import threading

    from chalicelib.workers import sweeper

    real = sweeper.sweep
    entered, released = threading.Event(), threading.Event()

    def held(*args, **kwargs):
        entered.set()
        released.wait(timeout)
        return real(*args, **kwargs)

    sweeper.sweep = held
    try:
        if not entered.wait(timeout):
            raise AssertionError("the stack's sweeper did not come round")
        yield
    finally:
        sweeper.sweep = real
        released.set()
