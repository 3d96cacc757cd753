"""Stored message templates: CRUD, archive, render preview, and rendering for sends.

Each of subject, html_body and text_body is a template of the safe Mustache subset
(services/sending/templating.py). Every part is validated when it is saved, so a template that does
not parse is refused with the line and column of the problem and never reaches a send.

Archived templates stay readable (show, list with ``include_archived``) but cannot be edited,
previewed or sent with: those answer as if the template did not exist (NotFound) for renders
and sends, and ValidationError for edits. Permalinks stay reserved after archiving.
"""
from __future__ import annotations

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from chalicelib import clock, errors
from chalicelib.db import unique
from chalicelib.db.models import Server, Template
from chalicelib.services.organizations.organizations import (permalink_taken,
                                                              save_with_permalink,
                                                              unique_permalink)
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import messaging as shape

PARTS = ("subject", "html_body", "text_body")


def _taken(db: Session, server: Server, permalink: str, exclude_id: int | None = None) -> bool:
    cond = [Template.server_id == server.id, Template.permalink == permalink]
    if exclude_id is not None:
        cond.append(Template.id != exclude_id)
    return bool(db.scalar(select(exists().where(*cond))))


def validate_parts(parts: dict) -> None:
    """Refuse any part that is not a template of the subset; the error names the part and
    carries the line and column the templating module reports."""
    subject = parts.get("subject")
    if subject is not None and ("\r" in subject or "\n" in subject):
        raise errors.ValidationError("subject: must be a single line", field="subject")
    # The template engine (and chevron) is imported on first use, not at cold start.
    from chalicelib.services.sending import templating

    for name in PARTS:
        source = parts.get(name)
        if source is None:
            continue
        try:
            templating.validate_template(source)
        except templating.TemplateSyntaxError as exc:
            raise errors.ValidationError(
                f"{name}: line {exc.line}, column {exc.column}: {exc.message}",
                field=name) from None


def _require_body(html_body: str | None, text_body: str | None) -> None:
    if not html_body and not text_body:
        raise errors.ValidationError("html_body: a template needs html_body or text_body",
                                     field="html_body")


def list_query(server: Server, *, include_archived: bool = False):
    stmt = select(Template).where(Template.server_id == server.id)
    if not include_archived:
        stmt = stmt.where(Template.archived_at.is_(None))
    return stmt.order_by(Template.id)


def find(db: Session, server: Server, permalink: str) -> Template:
    """The template, archived or not."""
    template = db.scalar(select(Template).where(Template.server_id == server.id,
                                                Template.permalink == permalink))
    if template is None:
        raise errors.NotFound(f"no template {permalink!r}")
    return template


def find_usable(db: Session, server: Server, permalink: str) -> Template:
    """The template for a render or a send: an archived one is as good as absent (404)."""
    template = find(db, server, permalink)
    if template.archived_at is not None:
        raise errors.NotFound(f"template {permalink!r} is archived")
    return template


def create(db: Session, server: Server, *, name: str, permalink: str | None = None,
           subject: str | None = None, html_body: str | None = None,
           text_body: str | None = None) -> Template:
    _require_body(html_body, text_body)
    validate_parts({"subject": subject, "html_body": html_body, "text_body": text_body})
    template = Template(server_id=server.id, name=name, subject=subject,
                        html_body=html_body, text_body=text_body)
    save_with_permalink(db, template, permalink, name, lambda p: _taken(db, server, p))
    return template


def update(db: Session, server: Server, template: Template, changes: dict) -> Template:
    """Apply the fields present in ``changes``; a part set to null is cleared."""
    if template.archived_at is not None:
        raise errors.ValidationError(f"template {template.permalink!r} is archived and cannot "
                                     "be changed", field="permalink")
    if changes.get("name") is not None:
        template.name = changes["name"]
    if changes.get("permalink") is not None and changes["permalink"] != template.permalink:
        wanted = unique_permalink(db, changes["permalink"], template.name,
                                  lambda p: _taken(db, server, p, exclude_id=template.id))
        with unique.guard(db, permalink_taken(wanted)):  # a rename racing a create
            template.permalink = wanted
    parts = {name: changes[name] for name in PARTS if name in changes}
    validate_parts(parts)
    merged = {name: parts.get(name, getattr(template, name)) for name in PARTS}
    _require_body(merged["html_body"], merged["text_body"])
    for name, value in parts.items():
        setattr(template, name, value)
    db.flush()  # the answer shows the new updated_at
    return template


def archive(template: Template) -> Template:
    if template.archived_at is None:
        template.archived_at = clock.now()
    return template


def unarchive(template: Template) -> Template:
    """Bring an archived template back: renders and sends find it again. Idempotent."""
    template.archived_at = None
    return template


@builds(shape.Rendered)
def render(template: Template, model, unsaved: dict | None = None) -> dict:
    """Render the three parts with ``model``: ``{subject, html_body, text_body}`` (a part the
    template lacks is None). ``unsaved``: parts to render instead of the saved ones, checked
    like an update first. Bounds exceeded or a refused template: ValidationError."""
    unsaved = {name: value for name, value in (unsaved or {}).items() if value is not None}
    validate_parts(unsaved)
    if model is None:
        model = {}
    if not isinstance(model, dict):
        raise errors.ValidationError("template_model: must be a JSON object",
                                     field="template_model")
    from chalicelib.services.sending import templating

    try:
        return templating.render_template(
            *(unsaved.get(name, getattr(template, name)) for name in PARTS), model)
    except templating.TemplateSyntaxError as exc:  # saved before a stricter validator
        raise errors.ValidationError(
            f"template {template.permalink!r} no longer parses: line {exc.line}, "
            f"column {exc.column}: {exc.message}", field="template") from None
    except templating.TemplateRenderError as exc:
        raise errors.ValidationError(f"template_model: {exc}", field="template_model") from None


