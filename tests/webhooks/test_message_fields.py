"""A notification's ``payload.message`` fields are one list (services/webhooks/payload.py's
``message_fields``, which the test send's sample goes through too), and docs/api.md names the
same fields."""
from __future__ import annotations

import os
import re

from chalicelib.db.models import Message
from chalicelib.services.webhooks import payload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_docs_name_the_message_fields():
    fields = set(payload.message_fields(Message(id=1, token="t", rcpt_to="a@example.com",
                                                mail_from="b@example.com", scope="outgoing",
                                                bounce=False, tag=None, metadata_json=None)))
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as fh:
        text = " ".join(fh.read().split())
    said = re.search(r"`payload\.message` carries `([^`]+)` and also `(\w+)` and `(\w+)`", text)
    assert said, "docs/api.md no longer says which fields payload.message carries"
    named = {f.strip() for f in said.group(1).split(",")} | {said.group(2), said.group(3)}
    assert named == fields
