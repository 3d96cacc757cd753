"""/api/v2/auth/options (ours): what a sign-in page needs to know before anyone signs in —
whether self-registration and single sign-on are on, the password rule, and whether the
installation has no user yet (the console then offers to create the first instance admin
with the operator's admin API key) — and the SMTP host and ports a mail client submits to, as
configured (the console shows them beside a new SMTP credential). Nothing here is secret."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib.api.framework import NONE, Call, endpoint
from chalicelib.config import Settings, get_settings
from chalicelib.services.accounts import users
from chalicelib import shapes
from chalicelib.shapes import accounts as shape
from chalicelib.shapes import builds

bp = Blueprint(__name__)


@endpoint(bp, "/options", "GET", auth=NONE,
          response=shapes.one("options", shape.SignInOptions))
def options(call: Call):
    """Sign-in options of this installation (public)."""
    settings = get_settings()
    return {"options": {
        "registration": settings.auth_allow_registration,
        "sso": settings.auth_oidc_enabled,
        "organization_creation": settings.auth_allow_organization_creation,
        "minimum_password_length": settings.auth_minimum_password_length,
        "first_run": not users.any_user_exists(call.db),
        "smtp": smtp_submission(settings),
    }}


@builds(shape.SmtpSubmission)
def smtp_submission(settings: Settings) -> dict:
    """The gateway's listeners as configured (SMTP_PORT, SMTP_SUBMISSION_PORTS, SMTP_TLS_PORT),
    read from the same settings the gateway starts from."""
    ports = [settings.smtp_port]
    for part in settings.smtp_submission_ports.split(","):
        if part.strip().isdigit() and int(part) not in ports:
            ports.append(int(part))
    return {"host": settings.smtp_hostname, "starttls_ports": ports,
            "tls_port": settings.smtp_tls_port or None,
            "auth_requires_tls": settings.smtp_auth_require_tls}
