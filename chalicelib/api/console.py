"""The web console on the API's origin: ``/`` and its page URLs answer index.html (history
routing: deep links and reloads work), ``/assets/...`` the files. Everything under ``/api/``
stays JSON. These routes exist on API Gateway too, so a deployed stage serves the console
from the same Lambda as the API; the local server also answers index.html for any other GET
that asks for HTML (chalicelib/local/http_server.py). One asset is written by the service
itself rather than read from console/: ``/assets/generated/rules.js`` (chalicelib/console/rules.py).
Both servers answer it through these routes."""
from __future__ import annotations

import time

from chalice import Blueprint, Response

from chalicelib.console import files as console, rules as console_rules
from chalicelib.api.framework import failure

bp = Blueprint(__name__)

# The console's page URLs (console/assets/app.js and pages/server/routes.js hold the pages).
PAGE_PATHS = [
    "/sign-in", "/sign-out", "/register", "/first-run", "/forgot-password", "/account",
    "/password-reset/{a}", "/invitations/{a}",
    "/orgs/{a}", "/orgs/{a}/{b}", "/orgs/{a}/{b}/{c}", "/orgs/{a}/{b}/{c}/{d}",
    "/orgs/{a}/{b}/{c}/{d}/{e}", "/orgs/{a}/{b}/{c}/{d}/{e}/{f}",
    "/admin/{a}", "/admin/{a}/{b}",
]


def _file(found) -> Response:
    if found is None:
        return failure("NotFound", "no console file at this path", time.perf_counter())
    body, content_type = found
    text = body.decode("utf-8")  # every console file is text (API Gateway needs no base64)
    return Response(body=text, status_code=200, headers=console.headers(content_type))


def _page_view(number: int):
    def view(**_params: str) -> Response:
        return _file(console.index())

    view.__name__ = f"console_page_{number}"  # Chalice names each route's view
    return view


for _number, _path in enumerate(["/"] + PAGE_PATHS):
    bp.route(_path, methods=["GET"])(_page_view(_number))


ASSET_PATHS = ["/assets/{a}", "/assets/{a}/{b}", "/assets/{a}/{b}/{c}"]
# Every route of this blueprint: static files, not API operations (no OpenAPI entries).
ROUTE_PATHS = frozenset(["/", *PAGE_PATHS, *ASSET_PATHS])


def _asset(*segments: str) -> Response:
    if segments == console_rules.SEGMENTS:
        # Generated, never a file: a stale copy under console/ cannot shadow the service's rules.
        text = console_rules.module().encode("utf-8")
        return _file((text, console.CONTENT_TYPES[".js"]))
    return _file(console.read("assets", *segments))


@bp.route("/assets/{a}", methods=["GET"])
def asset1(a: str) -> Response:
    return _asset(a)


@bp.route("/assets/{a}/{b}", methods=["GET"])
def asset2(a: str, b: str) -> Response:
    return _asset(a, b)


@bp.route("/assets/{a}/{b}/{c}", methods=["GET"])
def asset3(a: str, b: str, c: str) -> Response:
    return _asset(a, b, c)
