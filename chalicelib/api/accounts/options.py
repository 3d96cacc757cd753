"""/api/v2/auth/options (ours): what a sign-in page needs to know before anyone signs in —
whether self-registration and single sign-on are on, the password rule, and whether the
installation has no user yet (the console then offers to create the first instance admin
with the operator's admin API key) — and the SMTP host and ports a mail client submits to, as
configured (the console shows them beside a new SMTP credential). Nothing here is secret."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api.framework import NONE, Call, endpoint
from chalicelib.api.response_builders import accounts as records
from chalicelib.config import get_settings
from chalicelib.services.accounts import users
from chalicelib import response_shapes
from chalicelib.response_shapes import accounts as shape

bp = Blueprint(__name__)


@endpoint(bp, "/options", "GET", auth=NONE,
          response=response_shapes.one("options", shape.SignInOptions))
def options(call: Call):
    """Sign-in options of this installation (public)."""
    settings = get_settings()
    return {"options": {
        "registration": settings.auth_allow_registration,
        "sso": settings.auth_oidc_enabled,
        "organization_creation": settings.auth_allow_organization_creation,
        "minimum_password_length": settings.auth_minimum_password_length,
        "first_run": not users.any_user_exists(call.db),
        "smtp": records.smtp_submission(settings),
    }}


