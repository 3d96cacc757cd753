"""Messaging surface: sends with a stored template, one or a batch.

The template is rendered with the request's ``template_model``; subject, html_body and
text_body set directly in the request override the rendered ones. The result goes through the
same submission service as POST /messages (stream, From-domain, suppressions, tracking).
"""
from __future__ import annotations

from typing import Any

from chalice import Blueprint
from pydantic import ValidationError as PydanticValidationError

from chalicelib import errors, shapes
from chalicelib.api.framework import SERVER, Call, endpoint, validation_error_from
from chalicelib.api.schemas.messages import SendRequest
from chalicelib.api.schemas.template_sends import (TemplateBatchRequest, TemplateSendRequest,
                                                   shared_fields)
from chalicelib.db.models import Template
from chalicelib.services.sending import submission, templates
from chalicelib.shapes import messaging as shape

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
          status=201,
          response=shape.SendResult,
          idempotent=True)
def send_with_template(call: Call):
    """Send with a stored template; fields set directly override the rendered ones."""
    template = templates.find_usable(call.db, call.server, call.body.template)
    return submission.submit(call.db, call.server, build_request(template, call.body))


def _merge_entry(batch, shared: dict, entry: Any) -> dict:
    if not isinstance(entry, dict):
        raise errors.ValidationError("each entry must be an object with to and template_model",
                                     field="messages")
    if batch.template is not None and entry.get("template") not in (None, batch.template):
        raise errors.ValidationError(
            f"template: a batch uses one template ({batch.template!r}); send other templates "
            "in another batch, or name the template in each entry instead", field="template")
    if batch.template is None and entry.get("template") is None:
        raise errors.ParameterMissing("template is required (at the top level of the batch or "
                                      "in each entry)", field="template")
    model = entry.get("template_model")
    if model is not None and not isinstance(model, dict):
        raise errors.ValidationError("template_model: must be a JSON object",
                                     field="template_model")
    return {**shared, **entry, "template": batch.template or entry["template"],
            "template_model": {**(batch.template_model or {}), **(model or {})}}


@endpoint(bp, "/messages/with_template/batch", "POST", auth=SERVER, body=TemplateBatchRequest,
          array_field="messages",
          response=shape.TemplateBatchResult,
          idempotent=True)
def send_batch_with_template(call: Call):
    """A stored template to up to 500 entries with their own models; one result per entry.
    The body may also be a bare array of template sends, each naming its template."""
    batch = call.body
    # A top-level template serves the whole batch: unknown or archived fails the request
    # (404). Without one (the array form), each entry names its own and fails alone.
    shared_template = templates.find_usable(call.db, call.server, batch.template) \
        if batch.template is not None else None
    if shared_template is None and not any(isinstance(e, dict) and e.get("template") is not None
                                           for e in batch.messages):
        raise errors.ParameterMissing("template is required (at the top level of the batch or "
                                      "in each entry)", field="template")
    shared = shared_fields(batch)
    found: dict[str, Template] = {}
    used: set[str] = set()

    def parse(entry: Any) -> SendRequest:
        merged = _merge_entry(batch, shared, entry)
        try:
            request = TemplateSendRequest.model_validate(merged)
        except PydanticValidationError as exc:
            raise validation_error_from(exc) from None
        template = shared_template
        if template is None:
            if request.template not in found:
                found[request.template] = templates.find_usable(call.db, call.server,
                                                                request.template)
            template = found[request.template]
        used.add(template.permalink)
        return build_request(template, request)

    results = submission.submit_batch(call.db, call.server, batch.messages, parse=parse)
    accepted = sum(1 for r in results if r["status"] == "success")
    # `template`: the batch's one template; null when the entries used several (or none).
    permalink = shared_template.permalink if shared_template is not None else \
        (next(iter(used)) if len(used) == 1 else None)
    return {"template": permalink, "messages": results, "accepted": accepted,
            "failed": len(results) - accepted}
