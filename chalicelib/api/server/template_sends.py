"""Messaging surface: sends with a stored template, one or a batch (what a template send
stands for: services/sending/template_sends.py)."""
from __future__ import annotations

from typing import Any

from chalice import Blueprint
from pydantic import ValidationError as PydanticValidationError

from chalicelib.api.framework import SERVER, Call, endpoint, validation_error_from
from chalicelib.api.request_bodies.messages import SendRequest
from chalicelib.api.request_bodies.template_sends import (TemplateBatchRequest, TemplateSendRequest,
                                                   shared_fields)
from chalicelib.db.models import Template
from chalicelib.services.sending import submission, template_sends, templates
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


def build_request(template: Template, body: TemplateSendRequest) -> SendRequest:
    """The SendRequest a template send stands for."""
    return SendRequest.model_validate(template_sends.rendered_fields(template, body.model_dump()))


@endpoint(bp, "/messages/with_template", "POST", auth=SERVER, body=TemplateSendRequest,
          status=201,
          response=shape.SendResult,
          idempotent=True)
def send_with_template(call: Call):
    """Send with a stored template; fields set directly override the rendered ones."""
    template = templates.find_usable(call.db, call.server, call.body.template)
    return submission.submit(call.db, call.server, build_request(template, call.body))


@endpoint(bp, "/messages/with_template/batch", "POST", auth=SERVER, body=TemplateBatchRequest,
          array_field="messages",
          response=shape.TemplateBatchResult,
          idempotent=True)
def send_batch_with_template(call: Call):
    """A stored template to up to 500 entries with their own models; one result per entry.
    The body may also be a bare array of template sends, each naming its template."""
    batch = call.body
    chosen = template_sends.BatchTemplates(call.db, call.server, batch.template, batch.messages)
    shared = shared_fields(batch)

    def parse(entry: Any) -> SendRequest:
        merged = template_sends.merged_entry(batch.template, batch.template_model, shared, entry)
        try:
            request = TemplateSendRequest.model_validate(merged)
        except PydanticValidationError as exc:
            raise validation_error_from(exc) from None
        return build_request(chosen.for_entry(request.template), request)

    results = submission.submit_batch(call.db, call.server, batch.messages, parse=parse)
    accepted = sum(1 for r in results if r["status"] == "success")
    return {"template": chosen.answered(), "messages": results, "accepted": accepted,
            "failed": len(results) - accepted}
