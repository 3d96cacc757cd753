"""Request bodies of the template endpoints (TemplateInput, render preview). Unknown fields
are ignored. Template sources are checked by services/sending/templates.py."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from chalicelib.api.schemas import Schema


class TemplateIn(Schema):
    name: str = Field(min_length=1, max_length=255)
    permalink: str | None = None
    subject: str | None = None
    html_body: str | None = None
    text_body: str | None = None


class TemplateUpdate(Schema):
    name: str | None = Field(default=None, min_length=1, max_length=255)
    permalink: str | None = None
    subject: str | None = None
    html_body: str | None = None
    text_body: str | None = None


class RenderIn(Schema):
    template_model: dict[str, Any] | None = None
    # Unsaved text to render instead of the saved part (an editor's preview); checked like
    # a template update, nothing is stored.
    subject: str | None = None
    html_body: str | None = None
    text_body: str | None = None
