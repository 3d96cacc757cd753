"""Messaging surface: stored templates and the render preview."""
from __future__ import annotations

from chalice import Blueprint

from chalicelib import response_shapes
from chalicelib.api import query as q
from chalicelib.api.framework import SERVER, SERVER_READ, Call, endpoint, paginate
from chalicelib.api.request_bodies.templates import RenderIn, TemplateIn, TemplateUpdate
from chalicelib.api.server.streams import INCLUDE_ARCHIVED
from chalicelib.api.response_builders import messaging
from chalicelib.services.sending import templates
from chalicelib.response_shapes import messaging as shape

bp = Blueprint(__name__)


@endpoint(bp, "/templates", "GET", auth=SERVER, query=(*q.PAGINATION, INCLUDE_ARCHIVED),
          response=response_shapes.page("templates", shape.Template))
def list_templates(call: Call):
    """List templates without their bodies (archived ones with include_archived=true)."""
    stmt = templates.list_query(call.server,
                                include_archived=call.query_bool("include_archived"))
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"templates": [messaging.template(t, bodies=False) for t in rows],
            "pagination": pagination}


@endpoint(bp, "/templates", "POST", auth=SERVER, body=TemplateIn, status=201,
          response=response_shapes.one("template", shape.Template))
def create_template(call: Call):
    """Create a template; a part that does not parse is refused with its line and column."""
    template = templates.create(call.db, call.server, **call.body.model_dump())
    return {"template": messaging.template(template)}


@endpoint(bp, "/templates/{permalink}", "GET", auth=SERVER,
          response=response_shapes.one("template", shape.Template))
def show_template(call: Call, permalink: str):
    """Show a template with its subject and bodies, archived or not."""
    return {"template": messaging.template(templates.find(call.db, call.server, permalink))}


@endpoint(bp, "/templates/{permalink}", "PATCH", auth=SERVER, body=TemplateUpdate,
          response=response_shapes.one("template", shape.Template))
def update_template(call: Call, permalink: str):
    """Update the fields given; changed parts are validated again."""
    template = templates.find(call.db, call.server, permalink)
    templates.update(call.db, call.server, template, call.body.model_dump(exclude_unset=True))
    return {"template": messaging.template(template)}


@endpoint(bp, "/templates/{permalink}/archive", "POST", auth=SERVER,
          response=response_shapes.one("template", shape.Template))
def archive_template(call: Call, permalink: str):
    """Archive a template: it stays readable, but renders and sends answer 404."""
    template = templates.archive(templates.find(call.db, call.server, permalink))
    call.db.flush()
    return {"template": messaging.template(template)}


@endpoint(bp, "/templates/{permalink}/unarchive", "POST", auth=SERVER,
          response=response_shapes.one("template", shape.Template))
def unarchive_template(call: Call, permalink: str):
    """Bring an archived template back: renders and template sends find it again."""
    template = templates.unarchive(templates.find(call.db, call.server, permalink))
    call.db.flush()
    return {"template": messaging.template(template)}


@endpoint(bp, "/templates/{permalink}/render", "POST", auth=SERVER_READ, body=RenderIn,
          response=shape.Rendered)
def render_template(call: Call, permalink: str):
    """Render subject, html_body and text_body with template_model; sends nothing. Parts
    given in the body (unsaved text) are rendered instead of the saved ones."""
    template = templates.find_usable(call.db, call.server, permalink)
    body = call.body
    return templates.render(template, body.template_model, {
        "subject": body.subject, "html_body": body.html_body, "text_body": body.text_body})
