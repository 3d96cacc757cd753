"""Request bodies of the webhook endpoints (the spec's Webhook fields). Event names and the
URL are checked by the service, which lists the valid names in its error."""
from __future__ import annotations

from pydantic import Field, StrictBool

from chalicelib.api.request_bodies import Name, Schema


class WebhookIn(Schema):
    name: Name | None = None
    url: str = Field(min_length=1, max_length=2048)
    events: list[str] = Field(default_factory=list)
    sign: StrictBool = True
    headers: dict[str, str] = Field(default_factory=dict)
    enabled: StrictBool = True


class WebhookUpdate(Schema):
    """Only the fields given change. ``headers`` replaces the whole set; a value equal to the
    mask the API shows keeps that header's stored value (a GET's answer can be sent back)."""
    name: Name | None = None
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    events: list[str] | None = None
    sign: StrictBool | None = None
    headers: dict[str, str] | None = None


class WebhookTestIn(Schema):
    event: str
