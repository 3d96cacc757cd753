"""/api/v2/auth: register, login, logout, sessions, me, password change and reset, TOTP."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import NONE, SESSION, Call, endpoint, paginate
from chalicelib.api.request_bodies import accounts as schemas
from chalicelib.api.response_builders import accounts as records
from chalicelib.services.accounts import users, admin_keys, audit, sessions, totp
from chalicelib.response_shapes import accounts as shape

bp = Blueprint(__name__)


def client(call: Call) -> audit.Client:
    return audit.Client(call.ip_address, call.user_agent)


def session_answer(user, session, token) -> dict:
    return records.session_result(records.user(user), session, token)


@endpoint(bp, "/register", "POST", auth=NONE, body=schemas.RegisterIn, status=201,
          response=shape.SessionResult)
def register(call: Call):
    b = call.body
    return session_answer(*users.register(call.db, email=b.email_address,
                                             first_name=b.first_name, last_name=b.last_name,
                                             password=b.password, client=client(call)))


@endpoint(bp, "/login", "POST", auth=NONE, body=schemas.LoginIn, status=201,
          response=shape.SessionResult)
def login(call: Call):
    b = call.body
    return session_answer(*users.login(call.db, email=b.email_address, password=b.password,
                                          totp_code=b.totp_code, client=client(call)))


@endpoint(bp, "/logout", "POST", auth=SESSION,
          response=shape.LoggedOut)
def logout(call: Call):
    users.logout(call.db, call.principal.session, client(call))
    return {"logged_out": True}


@endpoint(bp, "/sessions", "GET", auth=SESSION, query=q.PAGINATION,
          response=response_shapes.page("sessions", shape.Session))
def list_sessions(call: Call):
    """The caller's active sessions (where and when each was used; current marks this one)."""
    current = call.principal.session
    rows, pagination = paginate(call.db, sessions.live_sessions_query(current.user_id),
                                *call.page_args())
    return {"sessions": [records.session(s, current.id) for s in rows],
            "pagination": pagination}


@endpoint(bp, "/sessions/{id}", "DELETE", auth=SESSION,
          response=shape.SessionRevoked)
def revoke_session(call: Call, id: int):  # noqa: A002  (the path parameter's name)
    """Sign one of the caller's sessions out (this one too: then it is a logout)."""
    current = call.principal.session
    target = sessions.find_live_session(call.db, current.user_id, id)
    sessions.revoke(target)
    audit.record(call.db, "session_revoked", client(call), user=call.principal.user,
                 details=f"session {target.id}")
    return {"session": records.session(target, current.id), "revoked": True}


@endpoint(bp, "/sessions/revoke_others", "POST", auth=SESSION,
          response=shape.Revoked)
def revoke_other_sessions(call: Call):
    """Sign out everywhere but here."""
    current = call.principal.session
    count = sessions.revoke_all(call.db, current.user_id, except_id=current.id)
    audit.record(call.db, "sessions_revoked", client(call), user=call.principal.user,
                 details=f"{count} other session(s)")
    return {"revoked": count}


def _me(call: Call) -> dict:
    user = call.principal.user
    return {"user": records.user(user),
            "memberships": [records.membership(m) for m in users.memberships(call.db, user)]}


@endpoint(bp, "/me", "GET", auth=SESSION,
          response=shape.Me)
def me(call: Call):
    return _me(call)


@endpoint(bp, "/me", "PATCH", auth=SESSION, body=schemas.ProfileIn,
          response=shape.Me)
def update_me(call: Call):
    user, body = call.principal.user, call.body
    if body.email_address is not None:
        users.change_own_email(call.db, user, body.email_address, body.current_password,
                                  client(call))
    users.update_profile(user, body.model_dump(exclude_unset=True))
    return _me(call)


@endpoint(bp, "/password", "POST", auth=SESSION, body=schemas.PasswordChangeIn,
          response=shape.SessionResult)
def change_password(call: Call):
    user = call.principal.user
    session, token = users.change_password(call.db, user,
                                              current_password=call.body.current_password,
                                              new_password=call.body.new_password,
                                              client=client(call))
    return session_answer(user, session, token)


@endpoint(bp, "/password-reset", "POST", auth=NONE, body=schemas.ResetRequestIn,
          response=shape.ResetRequested)
def request_reset(call: Call):
    # An admin API key marks the operator (or a frontend's back end that delivers the link
    # itself): only then does the answer carry the token. Everyone else gets the same message.
    key = call.headers.get("x-admin-api-key")
    operator = bool(key) and admin_keys.authenticate(call.db, key) is not None
    return users.request_password_reset(call.db, call.body.email_address, client(call),
                                           operator=operator)


@endpoint(bp, "/password-reset/complete", "POST", auth=NONE, body=schemas.ResetCompleteIn,
          response=shape.ResetCompleted)
def complete_reset(call: Call):
    user = users.complete_password_reset(call.db, token=call.body.token,
                                            password=call.body.password, client=client(call))
    return {"password_reset": True, "user": records.user(user)}


@endpoint(bp, "/totp/enroll", "POST", auth=SESSION,
          response=shape.TotpEnrollment)
def totp_enroll(call: Call):
    return totp.enroll(call.db, call.principal.user, client(call))


@endpoint(bp, "/totp/activate", "POST", auth=SESSION, body=schemas.TotpCodeIn,
          response=shape.TotpState)
def totp_activate(call: Call):
    totp.activate(call.db, call.principal.user, call.body.code, client(call))
    return {"totp_enabled": True, "user": records.user(call.principal.user)}


@endpoint(bp, "/totp/disable", "POST", auth=SESSION, body=schemas.PasswordIn,
          response=shape.TotpState)
def totp_disable(call: Call):
    user = call.principal.user
    users.check_password(call.db, user, call.body.password, client(call),
                            event="totp_disable_failed")
    totp.disable(call.db, user, client(call))
    return {"totp_enabled": False, "user": records.user(user)}
