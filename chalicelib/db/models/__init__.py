"""All models, imported together so SQLAlchemy and Alembic see the whole schema.

A new column: ``make migration m="what changed"`` writes its migration; give it a
``server_default`` when the table is written with core statements (messages, submissions:
INSERT ... SELECT over a row dict's keys, where a Python ``default`` never applies)."""
from chalicelib.db.models.accounts import (AuthEvent, Invitation, Membership, OidcLogin,
                                           Passkey, PasskeyCeremony, PasswordResetToken,
                                           SmtpAuthFailure, User, UserSession)
from chalicelib.db.models.dmarc import DmarcRecord, DmarcReport
from chalicelib.db.models.mail_frames import MailFrame
from chalicelib.db.models.messages import (CapturedMessage, Delivery, Message, MessageEvent,
                                           MessageRaw, RecipientFailure, Stream, Submission,
                                           Suppression, Template)
from chalicelib.db.models.mta_sts import MtaStsPolicy
from chalicelib.db.models.organizations import (AdminApiKey, ApiRateBucket, Credential, DkimKey,
                                                Domain, InstallationKey, IPAddress, IPPool,
                                                Organization, RetiredReturnPath, Server)
from chalicelib.db.models.pacing import DeliveryDestination, DeliveryLease
from chalicelib.db.models.reputation import (InfrastructureSignal, ReputationMark,
                                             ServerReputation)
from chalicelib.db.models.routes import Route
from chalicelib.db.models.sending_controls import BulkJob, IdempotencyKey, SendLimitCounter
from chalicelib.db.models.tracking import ClickEvent, OpenEvent, StatCounter, TrackedLink
from chalicelib.db.models.webhooks import Webhook, WebhookRequest, WebhookRequestLog

__all__ = [
    "AdminApiKey", "ApiRateBucket", "AuthEvent", "BulkJob", "CapturedMessage", "ClickEvent",
    "Credential", "Delivery", "DeliveryDestination", "DeliveryLease", "DkimKey", "DmarcRecord", "DmarcReport", "Domain",
    "IdempotencyKey", "InfrastructureSignal", "InstallationKey", "IPAddress", "IPPool", "Invitation",
    "MailFrame", "Membership", "Message", "MessageEvent", "MessageRaw", "MtaStsPolicy", "OidcLogin", "Passkey",
    "PasskeyCeremony", "RecipientFailure", "SendLimitCounter",
    "OpenEvent", "Organization", "PasswordResetToken", "ReputationMark", "RetiredReturnPath",
    "Route", "Server", "ServerReputation", "SmtpAuthFailure",
    "StatCounter", "Stream",
    "Submission", "Suppression", "Template", "TrackedLink", "User", "UserSession", "Webhook",
    "WebhookRequest", "WebhookRequestLog",
]

from chalicelib.db import counters  # noqa: E402,F401  (keeps StatCounter in step on every flush)
