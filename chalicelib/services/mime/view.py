"""Reading a stored message as a person looks at it: its headers, the text and HTML parts a
mail client would show, and the rest as attachments (inline images among them). Parsed by
the standard library's ``email`` package (``policy.default``), never by hand; a malformed
message still shows what can be read (the package records defects instead of failing).

``html_for_frame`` gives the HTML part with its inline images (``cid:`` references to parts
of the same message) turned into ``data:`` URLs, so the sandboxed mail frame, which loads
nothing from the service, shows them as a mail client does."""
from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from chalicelib import errors

if TYPE_CHECKING:
    from email.message import EmailMessage

MAX_INLINE_IMAGE = 2 * 1024 * 1024  # larger inline images stay links (the frame shows none)


def _parse(raw: bytes) -> EmailMessage:
    from email import policy  # imported at first use: the cold start does not pay for it
    from email.parser import BytesParser

    return BytesParser(policy=policy.default).parsebytes(raw)


def _text(part) -> str:
    """A text part's content; a charset Python does not know is read as UTF-8 with
    replacement characters rather than not at all."""
    try:
        return part.get_content()
    except (LookupError, UnicodeError, AssertionError):
        return (part.get_payload(decode=True) or b"").decode("utf-8", "replace")


def _bodies(message: EmailMessage):
    """(text part, HTML part) a mail client would show; either may be None."""
    try:
        text = message.get_body(("plain",))
        html = message.get_body(("html",))
    except (KeyError, TypeError):  # a multipart without a usable structure
        return None, None
    return text, html


def _leaves(message: EmailMessage, shown) -> list:
    """Every part that is not one of the shown bodies, in order: the leaves of the tree, an
    attached message (message/rfc822) counting as one."""
    found: list = []

    def visit(part) -> None:
        if any(part is s for s in shown):
            return
        if part is not message and part.get_content_type() == "message/rfc822":
            found.append(part)
        elif part.is_multipart():
            for sub in part.iter_parts():
                visit(sub)
        else:
            found.append(part)

    visit(message)
    return found


def _bytes(part) -> bytes:
    if part.get_content_type() == "message/rfc822":
        inner = part.get_payload()
        return inner[0].as_bytes() if isinstance(inner, list) and inner else b""
    return part.get_payload(decode=True) or b""


def _header_value(value) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001  (a header the parser could not make sense of)
        return repr(value)


def _describe(index: int, part) -> dict:
    payload = _bytes(part)
    content_id = (part.get("Content-ID") or "").strip().strip("<>") or None
    return {"index": index, "filename": part.get_filename(),
            "content_type": part.get_content_type(), "size": len(payload),
            "content_id": content_id,
            "inline": (part.get_content_disposition() or "inline") == "inline"}


def content(raw: bytes) -> dict:
    """{headers: [{name, value}], text_body, html_body, attachments: [...]} of a message."""
    message = _parse(raw)
    text, html = _bodies(message)
    leaves = _leaves(message, (text, html))
    return {"headers": [{"name": k, "value": _header_value(v)} for k, v in message.items()],
            "text_body": _text(text) if text is not None else None,
            "html_body": _text(html) if html is not None else None,
            "attachments": [_describe(i, p) for i, p in enumerate(leaves)]}


def attachment(raw: bytes, index: int) -> tuple[dict, bytes]:
    """(its description, its bytes) of the attachment ``index`` (as ``content`` lists them)."""
    message = _parse(raw)
    text, html = _bodies(message)
    leaves = _leaves(message, (text, html))
    if not 0 <= index < len(leaves):
        raise errors.NotFound(f"the message has no attachment {index}")
    return _describe(index, leaves[index]), _bytes(leaves[index])


def html_for_frame(raw: bytes) -> str | None:
    """The HTML part with its inline images as data: URLs; None when there is no HTML part."""
    message = _parse(raw)
    text, html = _bodies(message)
    if html is None:
        return None
    body = _text(html)
    for part in _leaves(message, (text, html)):
        content_id = (part.get("Content-ID") or "").strip().strip("<>")
        if not content_id or part.get_content_maintype() != "image":
            continue
        data = part.get_payload(decode=True) or b""
        if len(data) > MAX_INLINE_IMAGE:
            continue
        url = f"data:{part.get_content_type()};base64,{base64.b64encode(data).decode('ascii')}"
        for quote in ('"', "'"):
            body = body.replace(f"{quote}cid:{content_id}{quote}", f"{quote}{url}{quote}")
    return body
