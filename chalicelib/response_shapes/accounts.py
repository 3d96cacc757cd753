"""Shapes of the accounts surface's answers (/api/v2/auth) and of people management: users,
sessions, memberships, members and invitations."""
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from chalicelib.response_shapes import record


@record
@record
class User(TypedDict):
    id: int
    uuid: str
    email_address: str
    first_name: str
    last_name: str
    admin: bool
    totp_enabled: bool
    sso_linked: bool
    has_password: bool
    locked_until: datetime | None
    last_login_at: datetime | None
    created_at: datetime
    updated_at: datetime | None


@record
@record
class OrganizationRef(TypedDict):
    id: int
    name: str
    permalink: str


@record
@record
class Membership(TypedDict):
    """A membership from the user's side."""

    role: str
    organization: OrganizationRef


@record
@record
class Member(TypedDict):
    """A member from the organization's side."""

    user_id: int
    role: str
    organization: str | None
    email_address: str
    first_name: str
    last_name: str
    created_at: datetime


@record
@record
class Invitation(TypedDict):
    """An invitation; ``token`` and ``url`` only in the answer that creates it."""

    id: int
    email_address: str
    role: str
    organization: str | None
    status: Annotated[str, Field(description="pending, accepted, revoked or expired")]
    invited_by_user_id: int | None
    expires_at: datetime
    accepted_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    token: NotRequired[Annotated[str | None, Field(description="Shown once, at creation.")]]
    url: NotRequired[str | None]


@record
@record
class OrganizationName(TypedDict):
    name: str
    permalink: str


@record
@record
class InvitationPreview(TypedDict):
    email_address: str
    role: str
    organization: OrganizationName
    expires_at: datetime
    account_exists: bool


@record
@record
class InvitationPreviewAnswer(TypedDict):
    invitation: InvitationPreview


@record
@record
class SessionResult(TypedDict):
    """The spec's session result (register, login, password change, SSO)."""

    session_token: str
    expires_at: datetime
    user: User


@record
@record
class AcceptResult(TypedDict):
    """An accepted invitation; a new account is signed in (the session fields)."""

    membership: Membership
    user: User
    session_token: NotRequired[str | None]
    expires_at: NotRequired[datetime | None]


@record
@record
class Session(TypedDict):
    """One of the caller's sessions (never its token)."""

    id: int
    current: bool
    ip_address: str | None
    user_agent: str | None
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime


@record
@record
class SessionRevoked(TypedDict):
    session: Session
    revoked: bool


@record
@record
class Revoked(TypedDict):
    revoked: Annotated[int, Field(description="How many sessions were signed out.")]


@record
@record
class LoggedOut(TypedDict):
    logged_out: bool


@record
@record
class Me(TypedDict):
    user: User
    memberships: list[Membership]


@record
@record
class PasswordReset(TypedDict):
    """A reset link for the operator to hand out."""

    reset_token: str
    reset_url: str | None
    expires_at: datetime


@record
@record
class PasswordResetAnswer(TypedDict):
    password_reset: PasswordReset


@record
@record
class ResetRequested(TypedDict):
    """Always the message; the link only for a caller with an admin API key."""

    message: str
    reset_token: NotRequired[str | None]
    reset_url: NotRequired[str | None]
    expires_at: NotRequired[datetime | None]


@record
@record
class ResetCompleted(TypedDict):
    password_reset: bool
    user: User


@record
@record
class TotpEnrollment(TypedDict):
    secret: str
    otpauth_url: str
    totp_enabled: bool


@record
@record
class TotpState(TypedDict):
    totp_enabled: bool
    user: User


@record
@record
class AuthorizationUrl(TypedDict):
    authorization_url: str


@record
class SmtpSubmission(TypedDict):
    """Where mail clients submit over SMTP (the gateway's configured listeners)."""

    host: Annotated[str, Field(description="SMTP_HOSTNAME: the host name to connect to.")]
    starttls_ports: Annotated[list[int], Field(
        description="Plain listeners offering STARTTLS: SMTP_PORT, then SMTP_SUBMISSION_PORTS.")]
    tls_port: Annotated[int | None, Field(
        description="SMTP_TLS_PORT, the implicit-TLS listener; null when it is off.")]
    auth_requires_tls: Annotated[bool, Field(
        description="AUTH is offered only after STARTTLS or on the TLS port.")]


@record
class SignInOptions(TypedDict):
    """What the sign-in page may offer on this installation, and where SMTP clients connect."""

    registration: bool
    sso: bool
    organization_creation: bool
    minimum_password_length: int
    first_run: bool
    smtp: SmtpSubmission


@record
class Passkey(TypedDict):
    """A passkey of the signed-in user (never its key): what it is and when it was used."""

    id: int
    name: str
    aaguid: Annotated[str | None, Field(
        description="The authenticator model's AAGUID (all zeros when it does not say).")]
    backed_up: Annotated[bool, Field(
        description="Synced to the person's other devices (a multi-device passkey).")]
    created_at: datetime
    last_used_at: datetime | None


@record
class PasskeyList(TypedDict):
    passkeys: list[Passkey]


@record
class PasskeyRemoved(TypedDict):
    passkey: Passkey
    deleted: bool


@record
class PasskeyOptions(TypedDict):
    """The options of a WebAuthn ceremony and the token its answer goes back with."""

    ceremony: Annotated[str, Field(
        description="Send it back with the browser's answer, within 10 minutes; used once.")]
    options: Annotated[dict[str, Any], Field(
        description="PublicKeyCredentialCreationOptions or PublicKeyCredentialRequestOptions "
                    "as JSON (binary fields base64url): for PublicKeyCredential."
                    "parseCreationOptionsFromJSON / parseRequestOptionsFromJSON.")]
