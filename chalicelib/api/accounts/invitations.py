"""/api/v2/auth/invitations: the public preview and acceptance of an invitation."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api.accounts.session import client, session_answer
from chalicelib.api.auth import bearer_token
from chalicelib.api.framework import NONE, Call, endpoint
from chalicelib.api.request_bodies import accounts as schemas
from chalicelib.api.response_builders import accounts as records
from chalicelib.services.accounts import members, sessions
from chalicelib.response_shapes import accounts as shape

bp = Blueprint(__name__)


@endpoint(bp, "/invitations/{token}", "GET", auth=NONE,
          response=shape.InvitationPreviewAnswer)
def preview(call: Call, token: str):
    return {"invitation": members.preview(call.db, token)}


@endpoint(bp, "/invitations/accept", "POST", auth=NONE, body=schemas.InvitationAcceptIn,
          status=201,
          response=shape.AcceptResult)
def accept(call: Call):
    # Bearer is optional here: a signed-in invitee joins as themself, a new one gets an account.
    token = bearer_token(call.request)
    user = sessions.authenticate_session(call.db, token).user if token else None
    b = call.body
    result = members.accept(call.db, token=b.token, user=user, password=b.password,
                            first_name=b.first_name, last_name=b.last_name, client=client(call))
    answer = {"membership": records.membership(result["membership"]),
              "user": records.user(result["user"])}
    if result["session"] is not None:
        answer.update(session_answer(result["user"], *result["session"]))
    return answer
