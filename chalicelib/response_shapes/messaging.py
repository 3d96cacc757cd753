"""Shapes of the messaging surface's answers (/api/v2/server): messages, their delivery
attempts and events, send results, streams, templates, bounces, inbound messages, opens,
clicks (statistics: shapes/stats.py)."""
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from chalicelib.response_shapes import Pagination, record
from chalicelib.response_shapes.management import SendLimits
from chalicelib.response_shapes.reputation import ReputationBrief


class KeptSendFields(TypedDict):
    """The send request's fields each of its messages keeps as given, declared once: a name
    here is a field of SendRequest (api/request_bodies/messages.py, optional), a column of
    the messages table and a key of the Message record, all spelt the same.
    services/sending/submission.py stores every one of them and
    api/response_builders/messaging.py shows every one of them, without naming them;
    tests/sending/test_send_fields.py holds the request and the column to this list and
    sends each field through the API to read it back (docs/architecture.md, "A field of the
    send request")."""

    tag: str | None


# Their names, in declaration order (a frozenset's order would differ between processes).
KEPT_SEND_FIELDS: tuple[str, ...] = tuple(KeptSendFields.__annotations__)


@record
class Message(KeptSendFields):
    """One message (one recipient) as listed and shown."""

    id: int
    token: str
    scope: Annotated[str, Field(description="outgoing or incoming")]
    status: str
    status_details: str | None
    bounce_category: Annotated[str | None, Field(
        description="The category of the last failure or bounce (kept after a later success).")]
    bounce_reason: Annotated[str | None, Field(description=(
        "The reason of the last failure or bounce (docs/api.md, failure reasons; kept after a "
        "later success); null: it never failed, or it failed before reasons were recorded."))]
    rcpt_to: str
    mail_from: str
    subject: str | None
    message_id: Annotated[str | None, Field(description="The Message-ID header.")]
    submission_id: Annotated[int | None, Field(description="SendResult.message_id of its send.")]
    metadata: dict[str, Any] | None
    stream: Annotated[str | None, Field(description="The stream's permalink.")]
    bounce: bool
    held: bool
    return_path: Annotated[str | None, Field(description=(
        "The host of the envelope sender (return path) it went out with, by its last "
        "attempt that reached a server: the domain's own (rp.example.com) or the "
        "installation's; null before. Bounces to it are accepted while the message is kept, "
        "even after the domain changes its return path."))]
    size: int
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    sent_at: datetime | None
    track_opens: bool
    track_clicks: bool
    opens_count: int
    clicks_count: int
    created_at: datetime
    updated_at: datetime | None
    content_expired_at: Annotated[datetime | None, Field(description=(
        "When its content (raw source, signed copy) was erased by its server's content "
        "retention or a data removal; reads of the content then answer ContentExpired (410). "
        "Null while the content is kept."))]


@record
class Delivery(TypedDict):
    """One delivery attempt of an outgoing message."""

    id: int
    status: Annotated[str, Field(description="InFlight, Sent, SoftFail, HardFail or Unknown")]
    stage: str | None
    host: str | None
    code: Annotated[int | None, Field(description="The SMTP reply code.")]
    output: str | None
    details: str | None
    category: Annotated[str | None, Field(description="The failure's category; null when sent.")]
    reason: Annotated[str | None, Field(description=(
        "The failure's reason (docs/api.md, failure reasons); null when sent."))]
    about_recipient: Annotated[bool | None, Field(description=(
        "The failure says the recipient's address itself is bad; null when sent or when "
        "the attempt predates reasons."))]
    tls: Annotated[bool, Field(description="The session used STARTTLS.")]
    tls_verified: Annotated[bool, Field(description=(
        "The server's certificate was validated for its host name (checked when the "
        "recipient domain's MTA-STS policy asks for it)."))]
    mta_sts: Annotated[str | None, Field(description=(
        "The recipient domain's MTA-STS policy mode that applied (enforce, testing, none); "
        "null: it has none, or the mail went to a relay."))]
    source_address: Annotated[str | None, Field(description=(
        "The IP pool address the connection came from; null: no pool (the system's choice)."))]
    duration_ms: int | None
    timestamp: datetime


@record
class Event(TypedDict):
    """One entry of a message's history: the four webhook events (MessageSent,
    MessageDelayed, MessageDeliveryFailed, MessageHeld) and the ones recorded in the history
    only (MessageCancelled, MessageBounced, MessageComplained,
    MessageAuthFailureReported)."""

    event: str
    uuid: str
    details: str | None
    timestamp: datetime


@record
class MessageDetail(Message):
    """A message as shown by GET /messages/{id}: with its history and attempts."""

    events: list[Event]
    deliveries: list[Delivery]


@record
class Recipient(TypedDict):
    rcpt_to: str
    id: Annotated[int, Field(description="The message id of this recipient.")]
    token: str
    status: str


@record
class SendResult(TypedDict):
    """The SendResult: one message per recipient."""

    message_id: Annotated[int, Field(description="The id of the submission.")]
    recipients: list[Recipient]


@record
class EntryError(TypedDict):
    code: str
    message: str
    field: NotRequired[str | None]


@record
class BatchEntry(TypedDict):
    """One entry's result: data on success, error otherwise."""

    index: int
    status: Annotated[str, Field(description="success or error")]
    data: NotRequired[SendResult | None]
    error: NotRequired[EntryError | None]


@record
class BatchResult(TypedDict):
    messages: list[BatchEntry]
    accepted: int
    failed: int


@record
class TemplateBatchResult(BatchResult):
    template: Annotated[str | None, Field(description="The one template the entries used; "
                                                      "null when they used several.")]


@record
class Raw(TypedDict):
    message_id: int
    signed: Annotated[bool, Field(description="True once sent: the exact signed bytes.")]
    size: int
    raw: str
    raw_base64: str


@record
class MailHeader(TypedDict):
    name: str
    value: str


@record
class Attachment(TypedDict):
    """A part of a message other than the text and HTML shown (an inline image too)."""

    index: Annotated[int, Field(description="Its number in this list: GET .../attachments/{index}.")]
    filename: str | None
    content_type: str
    size: Annotated[int, Field(description="Bytes, decoded.")]
    content_id: Annotated[str | None, Field(description="What cid: URLs in the HTML name.")]
    inline: bool


@record
class MailContent(TypedDict):
    """A message as its recipient reads it (parsed from the source as submitted)."""

    headers: list[MailHeader]
    text_body: str | None
    html_body: Annotated[str | None, Field(
        description="The HTML part as text; to look at it, POST /mail_frames (a sandboxed "
                    "frame's URL).")]
    attachments: list[Attachment]


@record
class MailContentAnswer(TypedDict):
    message_id: int
    content: MailContent


@record
class AttachmentContent(TypedDict):
    index: int
    filename: str | None
    content_type: str
    size: int
    content_id: str | None
    inline: bool
    content_base64: str


@record
class AttachmentAnswer(TypedDict):
    attachment: AttachmentContent


@record
class CapturedMessage(TypedDict):
    """An entry of the server's captured-mail inbox: a message kept instead of sent."""

    id: int
    message_id: int
    reason: Annotated[str, Field(
        description="capture (DELIVERY_RELAY=capture) or development (the server is in "
                    "Development mode: held, never sent).")]
    mail_from: str | None
    rcpt_to: str | None
    subject: str | None
    status: str
    size: int
    created_at: datetime


@record
class CapturedDetail(TypedDict):
    captured: CapturedMessage
    content: MailContent


@record
class CapturedCleared(TypedDict):
    cleared: Annotated[int, Field(description="How many entries the inbox lost.")]


@record
class Stream(TypedDict):
    id: int
    name: str
    permalink: str
    stream_type: str
    description: str | None
    list_unsubscribe: Annotated[bool, Field(description="Its mail carries List-Unsubscribe "
                                                    "(always on broadcast streams).")]
    default: bool
    archived: bool
    archived_at: datetime | None
    created_at: datetime
    updated_at: datetime | None


@record
class Template(TypedDict):
    """A stored template; lists leave the bodies out."""

    id: int
    name: str
    permalink: str
    subject: str | None
    archived: bool
    archived_at: datetime | None
    created_at: datetime
    updated_at: datetime | None
    html_body: NotRequired[str | None]
    text_body: NotRequired[str | None]


@record
class MailFrame(TypedDict):
    """A mail's HTML to show in a sandboxed frame, at a short-lived URL of its own."""

    kind: str
    id: str | None
    url: str  # absolute, at PUBLIC_URL
    path: str  # the same, relative to the API's origin (what the console loads)
    expires_at: datetime


@record
class Rendered(TypedDict):
    """A rendered template (a part the template lacks is null)."""

    subject: str | None
    html_body: str | None
    text_body: str | None


@record
class OriginalMessage(TypedDict):
    id: int
    token: str
    rcpt_to: str
    mail_from: str
    subject: str | None
    status: str


@record
class Complaint(TypedDict):
    """A spam complaint's feedback report (ARF, RFC 5965)."""

    feedback_type: str | None
    user_agent: str | None
    original_mail_from: str | None
    original_rcpt_to: str | None
    arrival_date: str | None
    source_ip: str | None
    reported_domain: str | None


@record
class Bounce(TypedDict):
    """A bounce (DSN) received at a return-path address, with its parsed report."""

    id: int
    token: str
    scope: str
    bounce: bool
    rcpt_to: str
    mail_from: str
    subject: str | None
    size: int
    status_code: str | None
    action: str | None
    bounce_type: Annotated[str | None, Field(description=(
        "hard (the message failed), soft (a delay report), complaint (a spam complaint), "
        "auth_failure (an authentication-failure report, RFC 6591) or null (nothing read)"))]
    category: str | None
    reason: Annotated[str | None, Field(description=(
        "The failure's reason (docs/api.md, failure reasons); null for feedback reports."))]
    about_recipient: Annotated[bool | None, Field(description=(
        "The report says the recipient's address itself is bad."))]
    suppressed: Annotated[bool, Field(description=(
        "This report added the recipient to the suppression list."))]
    diagnostic: str | None
    final_recipient: str | None
    remote_mta: str | None
    reporting_mta: str | None
    original_message_id: int | None
    original_message: OriginalMessage | None
    complaint: Complaint | None
    created_at: datetime


@record
class RouteRef(TypedDict):
    id: int
    name: str
    mode: str


@record
class InboundAttempt(TypedDict):
    id: int
    status: str
    target: str | None
    code: int | None
    output: str | None
    details: str | None
    duration_ms: int | None
    created_at: datetime


@record
class InboundMessage(TypedDict):
    """An inbound message; shown (GET /inbound/{id}) with its delivery attempts."""

    id: int
    token: str
    scope: str
    bounce: bool
    rcpt_to: str
    mail_from: str
    subject: str | None
    message_id: str | None
    size: int
    status: str
    status_details: str | None
    held: bool
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    route: RouteRef | None
    created_at: datetime
    content_expired_at: Annotated[datetime | None, Field(description=(
        "When its content was erased (content retention or a data removal); retry and bypass "
        "then answer ContentExpired. Null while kept."))]
    deliveries: NotRequired[list[InboundAttempt] | None]


@record
class Open(TypedDict):
    id: int
    message_id: int
    ip_address: str | None
    user_agent: str | None
    likely_machine: bool
    detection: str | None
    created_at: datetime


@record
class Click(Open):
    url: str
    link_id: int


@record
class Opens(TypedDict):
    message_id: int
    opens_count: int
    opens: list[Open]
    pagination: Pagination


@record
class Clicks(TypedDict):
    message_id: int
    clicks_count: int
    clicks: list[Click]
    pagination: Pagination


@record
class CredentialRef(TypedDict):
    id: int
    name: str


@record
class ServerInfo(TypedDict):
    """The authenticated server, as its API key sees it."""

    id: int
    uuid: str
    name: str
    permalink: str
    mode: str
    suspended: bool
    suspension_reason: Annotated[str | None, Field(description=(
        "Why its sending is suspended (by an administrator, or paused by the reputation "
        "guard); null when it is not."))]
    organization: str
    credential: Annotated[CredentialRef | None, Field(
        description="The API credential used; null for a signed-in user of the console.")]
    send_limits: NotRequired[SendLimits]  # GET /server only
    reputation: NotRequired[ReputationBrief]  # GET /server only


@record
class Ping(TypedDict):
    pong: bool
    server: ServerInfo


@record
class Deliveries(TypedDict):
    deliveries: list[Delivery]


@record
class BulkJob(TypedDict):
    """A bulk action carried out by the workers in chunks."""

    id: int
    action: Annotated[str, Field(description="release, retry or cancel")]
    status: Annotated[str, Field(description="Queued, Running or Done")]
    matched: int
    done: int
    failed: int
    filter: dict[str, Any]
    details: str | None
    created_at: datetime
    updated_at: datetime | None
    finished_at: datetime | None


@record
class BulkAnswer(TypedDict):
    """POST /messages/bulk: a dry run's count, or the job started."""

    dry_run: NotRequired[bool]
    action: NotRequired[str]
    matched: NotRequired[int]
    job: NotRequired[BulkJob]
