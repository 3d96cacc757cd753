"""Typed errors raised by services. The API layer maps ``code`` to an HTTP status in one place
(chalicelib/api/errors.py); the SMTP gateway maps them to SMTP replies."""
from __future__ import annotations


class ServiceError(Exception):
    code = "InternalError"
    headers: dict[str, str] | None = None  # extra HTTP response headers

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class Unauthorized(ServiceError):
    code = "Unauthorized"


class Forbidden(ServiceError):
    code = "Forbidden"


class NotFound(ServiceError):
    code = "NotFound"


class ValidationError(ServiceError):
    code = "ValidationError"


class ParameterMissing(ServiceError):
    code = "ParameterMissing"


class InvalidCredentials(ServiceError):
    code = "InvalidCredentials"


class TOTPRequired(ServiceError):
    code = "TOTPRequired"


class InvalidTOTPCode(ServiceError):
    code = "InvalidTOTPCode"


class PasskeyRequired(ServiceError):
    """Ours: the account's second factor is a passkey (and it has no TOTP)."""

    code = "PasskeyRequired"


class AccountLocked(ServiceError):
    code = "AccountLocked"


class InvalidToken(ServiceError):
    code = "InvalidToken"


class SSOError(ServiceError):
    code = "SSOError"


class SSODisabled(ServiceError):
    code = "SSODisabled"


class RegistrationDisabled(ServiceError):
    code = "RegistrationDisabled"


class ServerSuspended(ServiceError):
    code = "ServerSuspended"


class PayloadTooLarge(ServiceError):
    code = "PayloadTooLarge"


class RateLimited(ServiceError):
    code = "RateLimited"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class SendLimitExceeded(ServiceError):
    code = "SendLimitExceeded"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class ContentExpired(ServiceError):
    """Ours: the message's content (raw source, signed copy) was erased, by its server's
    content retention or a data removal; its record stays."""

    code = "ContentExpired"


class IdempotencyKeyReused(ServiceError):
    code = "IdempotencyKeyReused"


class IdempotencyInProgress(ServiceError):
    code = "IdempotencyInProgress"
