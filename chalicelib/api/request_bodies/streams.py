"""Request bodies of the stream endpoints. Unknown fields are ignored."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from chalicelib.api.request_bodies import Name, Schema


class StreamIn(Schema):
    name: Name
    stream_type: Literal["transactional", "broadcast"] = "transactional"
    permalink: str | None = None
    description: str | None = Field(default=None, max_length=10_000)
    # List-Unsubscribe on this stream's mail: always on broadcast streams; a transactional
    # stream carries it only when this is true.
    list_unsubscribe: bool | None = None


class StreamUpdate(Schema):
    name: Name | None = None
    description: str | None = Field(default=None, max_length=10_000)
    # Accepted only unchanged: a stream's type is fixed at creation.
    stream_type: Literal["transactional", "broadcast"] | None = None
    list_unsubscribe: bool | None = None
