"""Records of people in answers: users, members, memberships, invitations, sessions, the
authentication audit trail, and the SMTP submission options."""
from __future__ import annotations

from chalicelib.config import Settings
from chalicelib.db.models import AuthEvent, Invitation, Membership, Passkey, User, UserSession
from chalicelib.services.accounts import members
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import accounts as shape, management as management_shape


@builds(shape.User)
def user(u: User) -> dict:
    return {"id": u.id, "uuid": u.uuid, "email_address": u.email_address,
            "first_name": u.first_name, "last_name": u.last_name, "admin": u.admin,
            "totp_enabled": u.totp_enabled, "sso_linked": u.oidc_subject is not None,
            "has_password": u.password_hash is not None, "locked_until": u.locked_until,
            "last_login_at": u.last_login_at, "created_at": u.created_at,
            "updated_at": u.updated_at}


@builds(shape.Member)
def member(m: Membership) -> dict:
    return {"user_id": m.user_id, "role": m.role,
            "organization": m.organization.permalink if m.organization else None,
            "email_address": m.user.email_address, "first_name": m.user.first_name,
            "last_name": m.user.last_name, "created_at": m.created_at}


@builds(shape.Membership)
def membership(m: Membership) -> dict:
    """A membership from the user's side (GET /auth/me)."""
    org = m.organization
    return {"role": m.role, "organization": {"id": org.id, "name": org.name,
                                             "permalink": org.permalink}}


@builds(shape.Invitation)
def invitation(inv: Invitation, token: str | None = None, url: str | None = None) -> dict:
    record = {"id": inv.id, "email_address": inv.email_address, "role": inv.role,
              "organization": inv.organization.permalink if inv.organization else None,
              "status": members.invitation_status(inv), "invited_by_user_id": inv.invited_by_user_id,
              "expires_at": inv.expires_at, "accepted_at": inv.accepted_at,
              "revoked_at": inv.revoked_at, "created_at": inv.created_at}
    if token is not None:  # only in the creation answer
        record["token"] = token
        record["url"] = url
    return record


@builds(shape.Session)
def session(session: UserSession, current_id: int) -> dict:
    """What a user sees of a session (never its token): where and when it was used."""
    return {"id": session.id, "current": session.id == current_id,
            "ip_address": session.ip_address, "user_agent": session.user_agent,
            "created_at": session.created_at, "last_used_at": session.last_used_at,
            "expires_at": session.expires_at}


@builds(shape.Passkey)
def passkey(p: Passkey) -> dict:
    return {"id": p.id, "name": p.name, "aaguid": p.aaguid, "backed_up": p.backed_up,
            "created_at": p.created_at, "last_used_at": p.last_used_at}


@builds(shape.SessionResult)
def session_result(user_record: dict, session: UserSession, token: str) -> dict:
    """The spec's session result: ``{session_token, expires_at, user}``."""
    return {"session_token": token, "expires_at": session.expires_at, "user": user_record}


@builds(management_shape.AuthEvent)
def auth_event(row: AuthEvent) -> dict:
    return {"id": row.id, "event": row.event, "success": row.success, "user_id": row.user_id,
            "email_address": row.email_address, "ip_address": row.ip_address,
            "user_agent": row.user_agent, "details": row.details, "created_at": row.created_at}


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
