"""One-click unsubscribe (RFC 8058): ``POST /u/{token}`` unsubscribes (a mailbox provider's
one-click request, or the form below); ``GET /u/{token}`` only shows a confirmation page with
that form (link scanners GET every link, so a GET must not unsubscribe). Public, no
credential; the token is HMAC-signed (services/suppressions/unsubscribe.py). Pages carry no script and a
Content-Security-Policy that allows none."""
from __future__ import annotations

import html

from chalice import Blueprint, Response

from chalicelib.api.framework import NONE, Call, endpoint
from chalicelib.services.suppressions import unsubscribe

bp = Blueprint(__name__)

HEADERS = {"Content-Type": "text/html; charset=utf-8",
           "Cache-Control": "no-store, max-age=0", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                      "form-action 'self'; frame-ancestors 'none'"}
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{title}</title>
<style>body{{font-family:sans-serif;max-width:32em;margin:4em auto;padding:0 1em}}
button{{font-size:1em;padding:.5em 1em}}</style></head>
<body><h1>{title}</h1>{body}</body></html>
"""


def _page(status: int, title: str, body: str) -> Response:
    return Response(body=_PAGE.format(title=html.escape(title), body=body),
                    status_code=status, headers=HEADERS)


def _not_found() -> Response:
    return _page(404, "Link not recognised",
                 "<p>This unsubscribe link is not valid. Check that the whole link was "
                 "copied, or use the unsubscribe option in the message itself.</p>")


@endpoint(bp, "/u/{token}", "GET", auth=NONE, raw=True)
def unsubscribe_page(call: Call, token: str):
    """The confirmation page of an unsubscribe link (a form that POSTs back)."""
    message_id = unsubscribe.message_id_from_token(token)
    if message_id is None or not unsubscribe.unsubscribable(call.db, message_id):
        return _not_found()  # a bad token, or mail deleted by retention since
    return _page(200, "Unsubscribe",
                 "<p>Stop receiving these messages at this address?</p>"
                 # no action: the form posts back to this page's own URL, whatever prefix
                 # (API Gateway stage, custom domain) it was reached through
                 '<form method="post">'
                 '<input type="hidden" name="List-Unsubscribe" value="One-Click">'
                 "<button type=\"submit\">Unsubscribe</button></form>")


@endpoint(bp, "/u/{token}", "POST", auth=NONE, raw=True)
def unsubscribe_now(call: Call, token: str):
    """One-click unsubscribe: suppress the recipient for the message's stream."""
    message_id = unsubscribe.message_id_from_token(token)
    message = None if message_id is None else \
        unsubscribe.unsubscribe(call.db, message_id, "one-click unsubscribe")
    if message is None:
        return _not_found()
    return _page(200, "You are unsubscribed",
                 f"<p>{html.escape(message.rcpt_to)} will not receive these messages any "
                 "more.</p>")
