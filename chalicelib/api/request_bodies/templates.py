"""Request bodies of the template endpoints (TemplateInput, render preview). Unknown fields
are ignored. Template sources are checked by services/sending/templates.py."""
from __future__ import annotations

from typing import Any

from chalicelib.api.request_bodies import Name, Schema


class TemplateIn(Schema):
    name: Name
    permalink: str | None = None
    subject: str | None = None
    html_body: str | None = None
    text_body: str | None = None


class TemplateUpdate(Schema):
    name: Name | None = None
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
