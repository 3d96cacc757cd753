"""``GET /mail-frames/{token}``: a mail frame's HTML (services/mailframes/), public (an
``<iframe>`` cannot send the console's Bearer token; the signed, short-lived URL is the
credential), with a policy of its own instead of the console's.

The policy lets the mail's inline styles, ``<style>`` blocks and images apply, and nothing
else: no script, no font, no form, no plugin, no fetch; ``sandbox`` puts the document in an
opaque origin even when the URL is opened on its own, so it can never read the console's
storage; ``frame-ancestors 'self'`` lets only the console's pages frame it. Outside /api/, so
not in the envelope: an expired or unknown URL answers a 404 page the frame can show."""
from __future__ import annotations

import html

from chalice import Blueprint, Response

from chalicelib import errors
from chalicelib.api.framework import NONE, Call, endpoint
from chalicelib.services.mailframes import frames

bp = Blueprint(__name__)

CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; "
                           "img-src data: https: http:; sandbox; frame-ancestors 'self'")
HEADERS = {"Content-Type": "text/html; charset=utf-8",
           "Content-Security-Policy": CONTENT_SECURITY_POLICY,
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           # A frame is the HTML of one moment of an editor or of someone's mail: not kept.
           "Cache-Control": "no-store"}


@endpoint(bp, "/mail-frames/{token}", "GET", auth=NONE, raw=True)
def show_mail_frame(call: Call, token: str):
    """A mail frame's HTML, with a Content-Security-Policy that allows only styles and images."""
    try:
        body = frames.html(call.db, token)
    except errors.NotFound as exc:
        page = f"<!doctype html><title>Not found</title><p>{html.escape(exc.message)}</p>"
        return Response(body=page, status_code=404, headers=HEADERS)
    return Response(body=body, status_code=200, headers=HEADERS)
