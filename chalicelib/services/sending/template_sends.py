"""Sends with a stored template, one or a batch: what a template send stands for.

The template is rendered with the request's ``template_model``; subject, html_body and
text_body set directly in the request override the rendered ones. The result is an ordinary
send request, which goes through the same submission service as any other (stream,
From-domain, suppressions, tracking). In a batch, a top-level template and model serve every
entry (an entry's own model values win); without a top-level template each entry names its
own. Requests arrive as plain dicts: the HTTP layer validates their shape before and after.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db.models import Server, Template
from chalicelib.services.sending import templates

MISSING_TEMPLATE = ("template is required (at the top level of the batch or in each entry)")


def rendered_fields(template: Template, fields: dict) -> dict:
    """The send request's fields: ``fields`` (without template and template_model) with every
    part it does not set taken from the rendered template."""
    rendered = templates.render(template, fields.get("template_model"))
    fields = {k: v for k, v in fields.items() if k not in ("template", "template_model")}
    for part in templates.PARTS:
        if fields.get(part) is None:
            fields[part] = rendered[part]
            if part == "subject" and rendered[part] and any(c in rendered[part] for c in "\r\n"):
                # A model value must not split the Subject header (the mail layer refuses it
                # too, but would blame "subject", which this request did not set).
                raise errors.ValidationError(
                    "template_model: a value puts a line break into the rendered subject",
                    field="template_model")
    return fields


def merged_entry(template: str | None, template_model: dict | None, shared: dict,
                 entry: Any) -> dict:
    """One batch entry with the batch's shared fields, template and model merged in."""
    if not isinstance(entry, dict):
        raise errors.ValidationError("each entry must be an object with to and template_model",
                                     field="messages")
    if template is not None and entry.get("template") not in (None, template):
        raise errors.ValidationError(
            f"template: a batch uses one template ({template!r}); send other templates "
            "in another batch, or name the template in each entry instead", field="template")
    if template is None and entry.get("template") is None:
        raise errors.ParameterMissing(MISSING_TEMPLATE, field="template")
    model = entry.get("template_model")
    if model is not None and not isinstance(model, dict):
        raise errors.ValidationError("template_model: must be a JSON object",
                                     field="template_model")
    return {**shared, **entry, "template": template or entry["template"],
            "template_model": {**(template_model or {}), **(model or {})}}


class BatchTemplates:
    """The templates of one batch: the top-level one (unknown or archived fails the whole
    request: 404), else each entry's own, looked up once (an unknown one fails its entry);
    and which template the answer names."""

    def __init__(self, db: Session, server: Server, template: str | None, entries: list):
        self.db, self.server = db, server
        self.shared = templates.find_usable(db, server, template) if template is not None \
            else None
        if self.shared is None and not any(isinstance(e, dict) and e.get("template") is not None
                                           for e in entries):
            raise errors.ParameterMissing(MISSING_TEMPLATE, field="template")
        self._found: dict[str, Template] = {}
        self._used: set[str] = set()

    def for_entry(self, permalink: str) -> Template:
        template = self.shared
        if template is None:
            if permalink not in self._found:
                self._found[permalink] = templates.find_usable(self.db, self.server, permalink)
            template = self._found[permalink]
        self._used.add(template.permalink)
        return template

    def answered(self) -> str | None:
        """The batch's one template; None when the entries used several (or none)."""
        if self.shared is not None:
            return self.shared.permalink
        return next(iter(self._used)) if len(self._used) == 1 else None
