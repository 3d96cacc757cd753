"""Where each field of the send request lands, written once: a field added to SendRequest
fails here until it has a place in every list that carries it (Prepared, the messages row,
the Message record's shape, which the record builder is held to by @builds), and a list
that carries a field the request lost fails too. The client is held to the same schema by tests/api/test_client.py; the checklist for
adding a field is in docs/architecture.md."""
from __future__ import annotations

import dataclasses

from chalicelib.api.request_bodies.messages import SendRequest
from chalicelib.db.models import Message
from chalicelib.services.sending.submission import Prepared
from chalicelib.response_shapes import messaging as shapes

CONTENT = None  # kept only in the message's MIME content (the raw bytes), not in a column

# request field -> (Prepared attribute, messages column, Message record key), or CONTENT.
WHERE: dict[str, tuple[str, str, str] | None] = {
    "from": ("mail_from", "mail_from", "mail_from"),
    "to": ("recipients", "rcpt_to", "rcpt_to"),
    "cc": CONTENT, "bcc": CONTENT, "reply_to": CONTENT, "html_body": CONTENT,
    "text_body": CONTENT, "headers": CONTENT, "attachments": CONTENT,
    "subject": ("subject", "subject", "subject"),
    "tag": ("tag", "tag", "tag"),
    "metadata": ("metadata", "metadata", "metadata"),
    "stream": ("stream", "stream_id", "stream"),
    "track_opens": ("track_opens", "track_opens", "track_opens"),
    "track_clicks": ("track_clicks", "track_clicks", "track_clicks"),
    "send_at": ("send_at", "next_attempt_at", "next_attempt_at"),
}


def test_every_request_field_has_a_place():
    fields = {f.alias or name for name, f in SendRequest.model_fields.items()}
    assert set(WHERE) == fields


def test_each_list_carries_the_fields_placed_in_it():
    placed = [p for p in WHERE.values() if p is not CONTENT]
    prepared = {f.name for f in dataclasses.fields(Prepared)}
    columns = set(Message.__table__.columns.keys())
    shape = set(shapes.Message.__annotations__)
    for attribute, column, key in placed:
        assert attribute in prepared, attribute
        assert column in columns, column
        assert key in shape, key
