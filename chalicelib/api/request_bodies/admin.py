"""Request bodies of the management surface. Unknown fields are ignored."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from chalicelib.api.request_bodies import DomainName, Name, Schema


def _time_zone(value: str | None) -> str | None:
    """An IANA time zone name the tz database knows (``Europe/Berlin``, ``UTC``)."""
    if value is None:
        return value
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone name such as Europe/Berlin "
                         "or UTC") from None
    return value


class OrganizationIn(Schema):
    name: Name
    permalink: str | None = None
    time_zone: str = Field(default="UTC", max_length=64)

    _zone = field_validator("time_zone")(_time_zone)


class OrganizationUpdate(Schema):
    name: Name | None = None
    time_zone: str | None = Field(default=None, max_length=64)

    _zone = field_validator("time_zone")(_time_zone)


class ServerIn(Schema):
    name: Name
    permalink: str | None = None
    mode: Literal["Live", "Development"] = "Live"


class ServerUpdate(Schema):
    name: Name | None = None
    mode: Literal["Live", "Development"] | None = None
    track_opens: bool | None = None
    track_clicks: bool | None = None
    message_retention_days: int | None = Field(default=None, ge=1, le=3650)
    # How long content (raw source, signed copy) is kept: at most message_retention_days.
    content_retention_days: int | None = Field(default=None, ge=1, le=3650)
    # Send limits: messages per hour / day (null: no limit) and what happens over them.
    send_limit_per_hour: int | None = Field(default=None, ge=0, le=10**9)
    send_limit_per_day: int | None = Field(default=None, ge=0, le=10**9)
    send_limit_action: Literal["hold", "reject"] | None = None


class SuspendIn(Schema):
    reason: str | None = Field(default=None, max_length=255)


class IPPoolAssign(Schema):
    ip_pool_id: int | None


class DomainIn(Schema):
    name: DomainName


class CredentialIn(Schema):
    type: Literal["API", "SMTP", "SMTP-IP"]
    name: Name
    ip_range: str | None = None
    hold: bool = False


class CredentialUpdate(Schema):
    name: Name | None = None
    hold: bool | None = None


class IPPoolIn(Schema):
    name: Name
    default: bool = False
    relay_host: str | None = Field(default=None, max_length=255)


class IPPoolUpdate(Schema):
    name: str | None = Field(default=None, min_length=1, max_length=255)
    default: bool | None = None
    relay_host: str | None = Field(default=None, max_length=255)


class IPAddressIn(Schema):
    ipv4: str | None = None
    ipv6: str | None = None
    hostname: str = Field(min_length=1, max_length=255)
    priority: int = Field(default=100, ge=0, le=1000)


class AdminKeyIn(Schema):
    name: Name


class DataRemovalIn(Schema):
    address: str = Field(max_length=320)
    # Keep the address's suppressions as a hash (still suppressed, not stored); false deletes
    # them.
    keep_suppression: bool = True
