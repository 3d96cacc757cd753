"""Request bodies of the accounts surface and of people management, and the record shapes of
users, memberships and invitations in answers. Unknown fields are ignored."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from chalicelib.api.request_bodies import Name as RequiredName, Schema
from chalicelib.services.accounts.passwords import MAX_PASSWORD_LENGTH

Email = Field(min_length=1, max_length=255)
Password = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)
Name = Field(default="", max_length=255)


class LoginIn(Schema):
    email_address: str = Email
    password: str = Password
    totp_code: str | None = Field(default=None, max_length=16)


class RegisterIn(Schema):
    email_address: str = Email
    # Registration requires both names (the spec lists all four fields without `?`).
    first_name: RequiredName
    last_name: RequiredName
    password: str = Password


class ProfileIn(Schema):
    first_name: str | None = Field(default=None, max_length=255)
    last_name: str | None = Field(default=None, max_length=255)
    # Changing the address needs the current password as well.
    email_address: str | None = Field(default=None, max_length=255)
    current_password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)


class PasswordChangeIn(Schema):
    current_password: str = Password
    new_password: str = Password


class ResetRequestIn(Schema):
    email_address: str = Email


class ResetCompleteIn(Schema):
    token: str = Field(min_length=1, max_length=256)
    password: str = Password


class TotpCodeIn(Schema):
    code: str = Field(min_length=1, max_length=16)


class PasswordIn(Schema):
    password: str = Password


class OptionalPasswordIn(Schema):
    """Re-authentication for a passkey change: required when the account has a password."""

    password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)


class PasskeyLoginOptionsIn(Schema):
    """Neither field: a passkey sign-in. Both: the password step before a passkey as the
    second factor."""

    email_address: str | None = Field(default=None, max_length=255)
    password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)


class PasskeyAnswerIn(Schema):
    """The browser's answer (PublicKeyCredential.toJSON()) to the options of ``ceremony``."""

    ceremony: str = Field(min_length=1, max_length=128)
    credential: dict[str, Any]


class PasskeyRegisterIn(PasskeyAnswerIn):
    name: str | None = Field(default=None, max_length=100)


class PasskeyRenameIn(Schema):
    name: str = Field(min_length=1, max_length=100)


class InvitationAcceptIn(Schema):
    token: str = Field(min_length=1, max_length=256)
    password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)
    first_name: str | None = Field(default=None, max_length=255)
    last_name: str | None = Field(default=None, max_length=255)


class MemberIn(Schema):
    user_id: int | None = None
    email_address: str | None = Field(default=None, max_length=255)
    role: str = "member"


class RoleIn(Schema):
    role: str = Field(min_length=1, max_length=16)


class InvitationIn(Schema):
    email_address: str = Email
    role: str = "member"


class UserIn(Schema):
    email_address: str = Email
    first_name: str = Name
    last_name: str = Name
    password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)
    admin: bool = False


class UserUpdate(Schema):
    email_address: str | None = Field(default=None, max_length=255)
    first_name: str | None = Field(default=None, max_length=255)
    last_name: str | None = Field(default=None, max_length=255)
    password: str | None = Field(default=None, max_length=MAX_PASSWORD_LENGTH)
    admin: bool | None = None
    locked: bool | None = None  # false lifts a lockout


# --- records ------------------------------------------------------------------------------


