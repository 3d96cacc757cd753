"""Request body of POST /server/mail_frames. Each kind checks its own ``id`` and ``parts``
(services/mailframes/kinds.py)."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from chalicelib.api.request_bodies import Schema


class MailFrameIn(Schema):
    kind: str = Field(min_length=1, max_length=32,
                      description="What to show: template (a stored template rendered with "
                                  "parts: template_model, and unsaved subject, html_body, "
                                  "text_body); message (a message's HTML part); captured "
                                  "(a captured-mail inbox entry's HTML part).")
    id: str | None = Field(default=None, max_length=255,
                           description="Which one: a template's permalink, a message's id, "
                                       "a captured-mail entry's id.")
    parts: dict[str, Any] | None = Field(
        default=None, description="What the kind renders with (for template: template_model "
                                  "and unsaved parts, as POST /templates/{permalink}/render).")
