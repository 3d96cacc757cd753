"""Request bodies of the messaging surface (SendRequest of the spec). Addresses, headers and
attachments get their detailed checks in services/mime.py (through the submission service),
so the error names the exact field (``to[2].email``, ``headers.X-Foo``)."""
from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from chalicelib.api.schemas import Schema


# An Address is "a@b.example", "Name <a@b.example>" or {"email", "name"}; an Attachment is
# {"name", "content_type", "data_base64"}. Both are checked by services/mime.py, whose errors
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
    tag: str | None = Field(default=None, max_length=255)
    metadata: dict[str, Any] | None = None
    stream: str | None = None
    # Per-message tracking override (services/tracking.resolve_flags; header X-Track too).
    track_opens: bool | None = None
    track_clicks: bool | None = None


class BatchRequest(Schema):
    """POST /messages/batch. Entries are validated one by one (a bad entry fails alone)."""

    messages: list[Any] = Field(min_length=1, max_length=500)


class SuppressionIn(Schema):
    address: str
    reason: str | None = Field(default=None, max_length=1000)
    days: int | None = Field(default=None, ge=1, le=3650)
