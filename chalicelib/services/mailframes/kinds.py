"""What a mail frame can show: one builder per kind. A builder gets the caller's server (the
caller is already authorized for it), the ``id`` and ``parts`` of the request, and returns
the HTML to show, or raises the service error a person can act on (NotFound for an id that
is not the server's, ValidationError naming ``parts.<name>``). To show something new, add a
builder and an entry in KINDS; the endpoint, the URL, the serving and the console's frame
(console/assets/mailframe.js) stay as they are."""
from __future__ import annotations

from typing import Any, Callable

from sqlalchemy.orm import Session

from chalicelib import errors
from chalicelib.db.models import Server
from chalicelib.services.messages import captured as captured_mail, search
from chalicelib.services.mime import view
from chalicelib.services.sending import templates

Builder = Callable[[Session, Server, "str | None", dict[str, Any]], str]


def _parts_error(exc: errors.ServiceError) -> errors.ServiceError:
    """A render error naming a part (``html_body``) as the request spells it (``parts.html_body``)."""
    if exc.field and exc.field != "template":
        exc.field = f"parts.{exc.field}"
        exc.message = f"parts.{exc.message}"
    return exc


def template(db: Session, server: Server, ref: str | None, parts: dict[str, Any]) -> str:
    """A stored template rendered with ``parts.template_model``; ``parts.subject``,
    ``parts.html_body`` and ``parts.text_body`` (unsaved text) replace the saved parts, as in
    POST /templates/{permalink}/render."""
    if not ref:
        raise errors.ParameterMissing("id is required: the template's permalink", field="id")
    unsaved = {}
    for name in templates.PARTS:
        value = parts.get(name)
        if value is not None and not isinstance(value, str):
            raise errors.ValidationError(f"parts.{name}: must be a string", field=f"parts.{name}")
        unsaved[name] = value
    found = templates.find_usable(db, server, ref)
    try:
        rendered = templates.render(found, parts.get("template_model"), unsaved)
    except errors.ValidationError as exc:
        raise _parts_error(exc) from None
    if not rendered["html_body"]:
        raise errors.ValidationError("parts.html_body: the template has no HTML part to show",
                                     field="parts.html_body")
    return rendered["html_body"]


def _number(ref: str | None, what: str) -> int:
    if not ref:
        raise errors.ParameterMissing(f"id is required: the {what}'s id", field="id")
    if not ref.isdigit() or len(ref) > 18:
        raise errors.NotFound(f"no {what} {ref!r} on this server")
    return int(ref)


def _shown(raw: bytes, what: str) -> str:
    html = view.html_for_frame(raw)
    if html is None:
        raise errors.ValidationError(f"id: the {what} has no HTML part to show (its text "
                                     "part is in its content)", field="id")
    return html


def message(db: Session, server: Server, ref: str | None, parts: dict[str, Any]) -> str:
    """A message's HTML part as its recipient sees it (inline images included), from the
    source as submitted: without the open pixel and rewritten links, so showing it counts
    no open and follows no click."""
    found = search.find(db, server.id, _number(ref, "message"))
    return _shown(search.view_source(db, found), "message")


def captured(db: Session, server: Server, ref: str | None, parts: dict[str, Any]) -> str:
    """A captured-mail inbox entry's HTML part (as ``message``)."""
    _, found = captured_mail.find(db, server.id, _number(ref, "captured message"))
    return _shown(search.view_source(db, found), "captured message")


# kind -> its builder. The kinds are the API's `kind` values (docs/api.md#mail-frames).
KINDS: dict[str, Builder] = {
    "template": template,
    "message": message,
    "captured": captured,
}
