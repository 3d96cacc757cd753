"""Messaging surface: sends with a stored template, one or a batch.

The template is rendered with the request's ``template_model``; subject, html_body and
text_body set directly in the request override the rendered ones. The result goes through the
same submission service as POST /messages (stream, From-domain, suppressions, tracking).
"""
from __future__ import annotations

from typing import Any

from chalice import Blueprint
from pydantic import ValidationError as PydanticValidationError

from chalicelib import errors
from chalicelib.api.framework import SERVER, Call, endpoint, validation_error_from
from chalicelib.api.schemas.messages import SendRequest
from chalicelib.api.schemas.template_sends import (TemplateBatchRequest, TemplateSendRequest,
                                                   shared_fields)
from chalicelib.db.models import Template
from chalicelib.services import submission, templates

bp = Blueprint(__name__)


def build_request(template: Template, body: TemplateSendRequest) -> SendRequest:
    """The SendRequest a template send stands for: rendered parts, overridden by the parts
    the request sets itself."""
    rendered = templates.render(template, body.template_model)
    fields = body.model_dump(exclude={"template", "template_model"})
    for part in templates.PARTS:
        if fields.get(part) is None:
            fields[part] = rendered[part]
            if part == "subject" and rendered[part] and any(c in rendered[part] for c in "\r\n"):
                # A model value must not split the Subject header (the mail layer refuses it
                # too, but would blame "subject", which this request did not set).
                raise errors.ValidationError(
                    "template_model: a value puts a line break into the rendered subject",
                    field="template_model")
    return SendRequest.model_validate(fields)


@endpoint(bp, "/messages/with_template", "POST", auth=SERVER, body=TemplateSendRequest,
          status=201)
def send_with_template(call: Call):
    """Send with a stored template; fields set directly override the rendered ones."""
    template = templates.find_usable(call.db, call.server, call.body.template)
    return submission.submit(call.db, call.server, build_request(template, call.body))


def _merge_entry(batch, shared: dict, entry: Any) -> dict:
    if not isinstance(entry, dict):
        raise errors.ValidationError("each entry must be an object with to and template_model",
                                     field="messages")
    if entry.get("template") not in (None, batch.template):
        raise errors.ValidationError(
            f"template: a batch uses one template ({batch.template!r}); send other templates "
            "in another batch", field="template")
    model = entry.get("template_model")
    if model is not None and not isinstance(model, dict):
        raise errors.ValidationError("template_model: must be a JSON object",
                                     field="template_model")
    return {**shared, **entry, "template": batch.template,
            "template_model": {**(batch.template_model or {}), **(model or {})}}


@endpoint(bp, "/messages/with_template/batch", "POST", auth=SERVER, body=TemplateBatchRequest)
def send_batch_with_template(call: Call):
    """One template, up to 500 entries with their own models; one result per entry."""
    batch = call.body
    # One template for the whole batch: unknown or archived fails the request (404).
    template = templates.find_usable(call.db, call.server, batch.template)
    shared = shared_fields(batch)

    def parse(entry: Any) -> SendRequest:
        merged = _merge_entry(batch, shared, entry)
        try:
            request = TemplateSendRequest.model_validate(merged)
        except PydanticValidationError as exc:
            raise validation_error_from(exc) from None
        return build_request(template, request)

    results = submission.submit_batch(call.db, call.server, batch.messages, parse=parse)
    accepted = sum(1 for r in results if r["status"] == "success")
    return {"template": template.permalink, "messages": results, "accepted": accepted,
            "failed": len(results) - accepted}
