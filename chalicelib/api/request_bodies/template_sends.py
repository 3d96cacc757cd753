"""Request bodies of template sends (the Template-send request of the spec, and its batch).
Unknown fields are ignored."""
from __future__ import annotations

from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from chalicelib.api.request_bodies import Schema
from chalicelib.api.request_bodies.messages import SendRequest

MAX_BATCH = 500


class TemplateSendRequest(SendRequest):
    """POST /messages/with_template: a SendRequest plus the template and its model. Fields
    set directly (non-null) override the rendered subject, html_body and text_body."""

    template: str = Field(min_length=1, max_length=64)
    template_model: dict[str, Any] | None = None


class _TemplateBatchBase(Schema):
    model_config = ConfigDict(populate_by_name=True)

    # Absent: each entry names its own template (as in the bare-array form of the body).
    template: str | None = Field(default=None, min_length=1, max_length=64)
    template_model: dict[str, Any] | None = None
    messages: list[Any] = Field(min_length=1, max_length=MAX_BATCH)

    # What one entry of the bare-array form is (items in the OpenAPI document).
    ENTRY: ClassVar[type] = TemplateSendRequest


# Every SendRequest field, optional, may sit at the top level of a batch and is then shared by
# all entries. Derived from SendRequest so a field added there is shareable (and documented in
# the OpenAPI document) without a second list to keep in step.
SHARED_FIELDS: dict[str, str] = {name: field.alias or name
                                 for name, field in SendRequest.model_fields.items()}

TemplateBatchRequest = create_model(  # type: ignore[call-overload]  # fields built at import
    "TemplateBatchRequest",
    __base__=_TemplateBatchBase,
    __doc__="""POST /messages/with_template/batch: one template, many entries.

    ``messages`` holds up to 500 entries, each a TemplateSendRequest without ``template``
    (typically ``to`` and ``template_model``, plus any SendRequest field of its own); without
    a top-level ``template``, each entry names its own. The body may also be a bare JSON
    array of TemplateSendRequest entries (read as ``{"messages": [...]}``). A
    SendRequest field at the top level is shared by every entry; an entry's own value wins.
    The top-level ``template_model`` is merged key by key under each entry's model.
    """,
    **{name: (Optional[field.annotation], FieldInfo.merge_field_infos(field, default=None))
       for name, field in SendRequest.model_fields.items()},
)


def shared_fields(batch: BaseModel) -> dict[str, Any]:
    """The SendRequest fields the batch sets at its top level, keyed as JSON spells them."""
    return {alias: getattr(batch, name) for name, alias in SHARED_FIELDS.items()
            if name in batch.model_fields_set}
