"""/api/v2/auth/passkeys (ours): a signed-in user's passkeys (list, register, rename, remove)
and signing in with one, alone or as the second factor after the password. The ceremonies
and their rules are in services/accounts/passkeys.py."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api.accounts.session import client, session_answer
from chalicelib.api.framework import NONE, SESSION, Call, endpoint
from chalicelib.api.response_builders import accounts as records
from chalicelib.api.request_bodies import accounts as schemas
from chalicelib.services.accounts import passkeys
from chalicelib.response_shapes import accounts as shape

bp = Blueprint(__name__)


@endpoint(bp, "/passkeys", "GET", auth=SESSION, response=shape.PasskeyList)
def list_passkeys(call: Call):
    """The caller's passkeys, oldest first."""
    return {"passkeys": [records.passkey(p)
                         for p in passkeys.passkeys_of(call.db, call.principal.user.id)]}


@endpoint(bp, "/passkeys/registration/options", "POST", auth=SESSION,
          body=schemas.OptionalPasswordIn, response=shape.PasskeyOptions)
def registration_options(call: Call):
    """Options for navigator.credentials.create() (the password first, when you have one)."""
    return passkeys.registration_options(call.db, call.principal.user, call.body.password,
                                         client(call))


@endpoint(bp, "/passkeys", "POST", auth=SESSION, body=schemas.PasskeyRegisterIn, status=201,
          response=response_shapes.one("passkey", shape.Passkey))
def register_passkey(call: Call):
    """Register the passkey the browser made from the registration options."""
    b = call.body
    return {"passkey": records.passkey(passkeys.register(
        call.db, call.principal.user, b.ceremony, b.credential, b.name, client(call)))}


@endpoint(bp, "/passkeys/{id}", "PATCH", auth=SESSION, body=schemas.PasskeyRenameIn,
          response=response_shapes.one("passkey", shape.Passkey))
def rename_passkey(call: Call, id: int):  # noqa: A002  (the path parameter's name)
    """Rename one of your passkeys."""
    return {"passkey": records.passkey(passkeys.rename(call.db, call.principal.user, id,
                                                       call.body.name, client(call)))}


@endpoint(bp, "/passkeys/{id}/remove", "POST", auth=SESSION, body=schemas.OptionalPasswordIn,
          response=shape.PasskeyRemoved)
def remove_passkey(call: Call, id: int):  # noqa: A002
    """Remove one of your passkeys (the password first, when you have one)."""
    removed = passkeys.remove(call.db, call.principal.user, id, call.body.password,
                              client(call))
    return {"passkey": records.passkey(removed), "deleted": True}


@endpoint(bp, "/passkeys/login/options", "POST", auth=NONE,
          body=schemas.PasskeyLoginOptionsIn, response=shape.PasskeyOptions)
def login_options(call: Call):
    """Options for navigator.credentials.get(): a passkey sign-in (empty body), or the
    second factor after the password (email_address and password)."""
    return passkeys.login_options(call.db, call.body.email_address, call.body.password,
                                  client(call))


@endpoint(bp, "/passkeys/login", "POST", auth=NONE, body=schemas.PasskeyAnswerIn, status=201,
          response=shape.SessionResult)
def passkey_login(call: Call):
    """Sign in with the browser's answer to the sign-in options: a session, as /login."""
    return session_answer(*passkeys.login(call.db, call.body.ceremony, call.body.credential,
                                          client(call)))
