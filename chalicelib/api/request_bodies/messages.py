"""Request bodies of the messaging surface (SendRequest of the spec). Addresses, headers and
attachments get their detailed checks in services/mime/ (through the submission service),
so the error names the exact field (``to[2].email``, ``headers.X-Foo``)."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from chalicelib.api.request_bodies import Schema


# An Address is "a@b.example", "Name <a@b.example>" or {"email", "name"}; an Attachment is
# {"name", "content_type", "data_base64"}. Both are checked by services/mime/, whose errors
# name the exact field (a pydantic union would report every branch it tried).
AddressValue = Any
AttachmentValue = Any


class SendRequest(Schema):
    """POST /messages. Unknown fields are ignored."""

    model_config = ConfigDict(populate_by_name=True)

    from_: AddressValue = Field(alias="from")
    to: list[AddressValue]
    cc: list[AddressValue] | None = None
    bcc: list[AddressValue] | None = None
    reply_to: list[AddressValue] | None = None
    subject: str | None = None
    html_body: str | None = None
    text_body: str | None = None
    headers: dict[str, str] | None = None
    attachments: list[AttachmentValue] | None = None
    # A field each message keeps as given (stored in the column of its name, shown under its
    # name) is also named in response_shapes/messaging.py's KeptSendFields: the list it is
    # stored and shown from (docs/architecture.md, "A field of the send request").
    tag: str | None = Field(default=None, max_length=255)
    metadata: dict[str, Any] | None = None
    stream: str | None = None
    # Per-message tracking override (services/tracking.resolve_flags; header X-Track too).
    track_opens: bool | None = None
    track_clicks: bool | None = None
    # RFC 3339 date-time: later than now -> the message is Scheduled until then (at most
    # 30 days ahead); now or in the past -> sent now (services/submission.check_send_at).
    send_at: datetime | None = None


class BatchRequest(Schema):
    """POST /messages/batch. Entries are validated one by one (a bad entry fails alone).
    The body may also be a bare JSON array of SendRequests."""

    # What one entry is: the items of the bare-array form in the OpenAPI document.
    ENTRY: ClassVar[type] = SendRequest

    messages: list[Any] = Field(min_length=1, max_length=500)


class SuppressionIn(Schema):
    address: str
    # HardBounce, SpamComplaint, Unsubscribe or Manual (default). Any other text is taken as
    # ``details`` with reason Manual (clients from before reasons were a list send free text).
    reason: str | None = Field(default=None, max_length=1000)
    details: str | None = Field(default=None, max_length=1000)
    stream: str | None = Field(default=None, max_length=64)  # permalink; absent: every stream
    days: int | None = Field(default=None, ge=1, le=3650)


class BulkFilter(Schema):
    """Which outgoing messages a bulk action covers (all given conditions apply)."""

    status: str | None = Field(default=None, max_length=16)
    tag: str | None = Field(default=None, max_length=255)
    stream: str | None = Field(default=None, max_length=64)
    rcpt_to: str | None = Field(default=None, max_length=255)
    before: datetime | None = None  # created before
    after: datetime | None = None   # created at or after
    ids: list[Annotated[int, Field(ge=1, le=2**63 - 1)]] | None = Field(
        default=None, min_length=1, max_length=10000)


class BulkRequest(Schema):
    """POST /messages/bulk."""

    action: Literal["release", "retry", "cancel"]
    filter: BulkFilter = Field(default_factory=BulkFilter)
    dry_run: bool = False


class SuppressionImport(Schema):
    """POST .../suppressions/import: entries ``{address, reason?, stream?}``, checked one by
    one (a bad entry is skipped, not fatal)."""

    suppressions: list[Any] = Field(max_length=10_000)
