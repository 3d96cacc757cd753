"""Request body models of the HTTP surfaces (the OpenAPI document is generated from them),
and the field types they share."""
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class Schema(BaseModel):
    """Base of every request body model. defer_build: a model's validator is built the first
    time it validates (or the OpenAPI generator reads it), not at import (cold start)."""

    model_config = ConfigDict(defer_build=True)


def _trimmed(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("must not be empty (or only spaces)")
    return value


def trimmed_name(max_length: int):
    """The type of a resource's name: stored without surrounding spaces, and refused when
    nothing else is left (a name of spaces becomes a blank entry in every list and a
    meaningless permalink). The error names the field (422 ValidationError)."""
    return Annotated[str, Field(max_length=max_length, json_schema_extra={"minLength": 1}),
                     AfterValidator(_trimmed)]


# Every named resource's name (organizations, servers, credentials, IP pools, admin keys,
# streams, templates, webhooks, registering people), a domain's name and an inbound route's
# name (the local part it matches; services/inbound/routes.py checks the rest).
Name = trimmed_name(255)
DomainName = trimmed_name(253)
RouteName = trimmed_name(64)
