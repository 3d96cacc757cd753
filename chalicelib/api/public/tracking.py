"""The tracking endpoints embedded in sent mail: ``/t/o/{token}`` (open pixel) and
``/t/c/{token}`` (click redirect). Public, no credential; unknown or tampered tokens get the
envelope's 404. A click redirects only to the URL stored with its token."""
from __future__ import annotations

import base64
from urllib.parse import quote

from chalice import Blueprint, Response
from chalice.app import APIGateway, _matches_content_type

from chalicelib.api.framework import NONE, Call, endpoint
from chalicelib.services.tracking import engagement

bp = Blueprint(__name__)

PIXEL_GIF = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
NO_CACHE = {"Cache-Control": "no-store, no-cache, must-revalidate, max-age=0",
            "Pragma": "no-cache", "Expires": "0", "Referrer-Policy": "no-referrer"}
# Header-safe form of a stored URL: non-ASCII, spaces and controls percent-encoded, the URL's
# own delimiters and existing escapes kept.
_URL_SAFE = ":/?#[]@!$&'()*+,;=%~"
_BINARY_TYPES = APIGateway().binary_types


def _can_send_gif(call: Call) -> bool:
    # Chalice (and API Gateway) refuse a binary body unless the request's Accept header names
    # a binary type or */*; such clients (no Accept, or only image/*) get an empty 204.
    accept = call.headers.get("accept")
    return accept is not None and _matches_content_type(accept, _BINARY_TYPES)


@endpoint(bp, "/t/o/{token}", "GET", auth=NONE, raw=True)
def open_pixel(call: Call, token: str):
    engagement.record_open(call.db, token, ip=call.ip_address, user_agent=call.user_agent)
    if not _can_send_gif(call):
        return Response(body="", status_code=204, headers=NO_CACHE)
    return Response(body=PIXEL_GIF, status_code=200,
                    headers={"Content-Type": "image/gif", **NO_CACHE})


def _click(call: Call, token: str, method: str) -> Response:
    event = engagement.record_click(call.db, token, ip=call.ip_address,
                                  user_agent=call.user_agent, method=method)
    return Response(body="", status_code=302,
                    headers={"Location": quote(event.url, safe=_URL_SAFE), **NO_CACHE})


@endpoint(bp, "/t/c/{token}", "GET", auth=NONE, raw=True)
def click_redirect(call: Call, token: str):
    return _click(call, token, "GET")


@endpoint(bp, "/t/c/{token}", "HEAD", auth=NONE, raw=True)
def click_probe(call: Call, token: str):
    # Link scanners probe with HEAD: recorded as a likely machine click, same redirect.
    return _click(call, token, "HEAD")
