"""/api/v2/auth/oidc: single sign-on start and callback.

start: 307 to the provider, or 200 ``{authorization_url}`` when the client asks for JSON.
callback: 201 with the session when the client asks for JSON; otherwise (a browser coming back from the provider) 307 to the frontend with
``#session_token=…&expires_at=…`` — or ``#error=SSOError&error_description=…`` on failure — in
the fragment, which browsers never send to servers or put in Referer headers.
"""
from __future__ import annotations

import time
from urllib.parse import urlencode

from chalice import Blueprint, Response

from chalicelib import errors
from chalicelib.api.accounts.session import client, session_answer
from chalicelib.api import query as q
from chalicelib.api.framework import NONE, Call, endpoint, success
from chalicelib.config import get_settings
from chalicelib.services.accounts import sso
from chalicelib.response_shapes import accounts as shape

bp = Blueprint(__name__)


def wants_json(call: Call) -> bool:
    return "application/json" in (call.headers.get("accept") or "").lower()


def _redirect(location: str) -> Response:
    return Response(body="", status_code=307,
                    headers={"Location": location, "Cache-Control": "no-store"})


@endpoint(bp, "/oidc/start", "GET", auth=NONE, raw=True,
          response=shape.AuthorizationUrl)
def start(call: Call):
    url = sso.start(call.db)
    if wants_json(call):
        return success({"authorization_url": url}, 200, time.perf_counter(),
                       {"Cache-Control": "no-store"})
    return _redirect(url)


@endpoint(bp, "/oidc/callback", "GET", auth=NONE, raw=True, query=(
    q.string("code", "Authorization code from the provider."),
    q.string("state", "The state this service sent with the authorization request."),
    q.string("error", "Error code from the provider."),
    q.string("error_description", "Error text from the provider.")),
          status=201, response=shape.SessionResult)
def callback(call: Call):
    # No AUTH_FRONTEND_URL: the console served at PUBLIC_URL takes the browser back.
    frontend = get_settings().effective_frontend_url
    redirect = not wants_json(call)
    q = call.query
    try:
        user, session, token = sso.callback(call.db, code=q.get("code"), state=q.get("state"),
                                            error=q.get("error"),
                                            error_description=q.get("error_description"),
                                            client=client(call))
    except errors.ServiceError as exc:
        if not redirect:
            raise
        return _redirect(f"{frontend}#" + urlencode({"error": exc.code,
                                                     "error_description": exc.message}))
    answer = session_answer(user, session, token)
    if redirect:
        expires = answer["expires_at"].replace(microsecond=0).isoformat() + "Z"
        return _redirect(f"{frontend}#" + urlencode({"session_token": token,
                                                     "expires_at": expires}))
    return success(answer, 201, time.perf_counter(), {"Cache-Control": "no-store"})
