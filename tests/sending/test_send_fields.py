"""Where each field of the send request lands. A field each message keeps as given is declared
once, in response_shapes.messaging.KeptSendFields: the submission service stores it and the
record builder shows it from that list, and the tests here hold the rest to it (the
SendRequest field, the column) and send each such field through the API to read it back, so a
new one needs no test of its own to be covered. Every other field has its place written in
``WHERE``: a field added to SendRequest fails here until it is kept or placed. The client
takes any SendRequest field (tests/api/test_client.py); the checklist for adding a field is in
docs/architecture.md."""
from __future__ import annotations

import dataclasses
import typing

import pytest
from sqlalchemy import String, inspect

from chalicelib.api.request_bodies.messages import SendRequest
from chalicelib.db.models import Message
from chalicelib.response_shapes import messaging as shapes
from chalicelib.services.sending.submission import Prepared
from tests.support import Api
from tests.support.sending import SERVER, message, rcpt, sent_ok

CONTENT = None  # kept only in the message's MIME content (the raw bytes), not in a column

# request field -> (Prepared attribute, messages column, Message record key), or CONTENT:
# the fields that are not kept as given (checked, resolved or renamed on their way).
WHERE: dict[str, tuple[str, str, str] | None] = {
    "from": ("mail_from", "mail_from", "mail_from"),
    "to": ("recipients", "rcpt_to", "rcpt_to"),
    "cc": CONTENT, "bcc": CONTENT, "reply_to": CONTENT, "html_body": CONTENT,
    "text_body": CONTENT, "headers": CONTENT, "attachments": CONTENT,
    "subject": ("subject", "subject", "subject"),
    "metadata": ("metadata", "metadata", "metadata"),
    "stream": ("stream", "stream_id", "stream"),
    "track_opens": ("track_opens", "track_opens", "track_opens"),
    "track_clicks": ("track_clicks", "track_clicks", "track_clicks"),
    "send_at": ("send_at", "next_attempt_at", "next_attempt_at"),
}

KEPT = shapes.KEPT_SEND_FIELDS
# A value to send for a kept field, by its type (a kept field of another type: add one here).
SAMPLES = {str: "spring-sale", bool: True, int: 7}


def test_every_request_field_is_kept_or_placed():
    fields = {f.alias or name for name, f in SendRequest.model_fields.items()}
    assert not set(KEPT) & set(WHERE), "a field is either kept as given or placed in WHERE"
    assert set(KEPT) | set(WHERE) == fields


def test_each_list_carries_the_fields_placed_in_it():
    placed = [p for p in WHERE.values() if p is not CONTENT]
    prepared = {f.name for f in dataclasses.fields(Prepared)}
    columns = set(Message.__table__.columns.keys())
    shape = set(shapes.Message.__annotations__)
    for attribute, column, key in placed:
        assert attribute in prepared, attribute
        assert column in columns, column
        assert key in shape, key


@pytest.mark.parametrize("name", KEPT)
def test_a_kept_field_is_an_optional_request_field_and_a_column_of_its_name(name):
    field = SendRequest.model_fields[name]
    assert field.alias is None and field.default is None and not field.is_required()
    declared = typing.get_type_hints(shapes.KeptSendFields)[name]
    assert field.annotation == declared, "SendRequest and KeptSendFields give the same type"
    column = Message.__table__.c[name]
    assert column.nullable, "an absent field is stored as NULL"
    # The builder reads the attribute of the column's name (not so for metadata_json).
    assert inspect(Message).get_property_by_column(column).key == name
    if isinstance(column.type, String) and column.type.length is not None:
        longest = next((m.max_length for m in field.metadata
                        if getattr(m, "max_length", None) is not None), None)
        assert longest is not None and longest <= column.type.length, \
            f"SendRequest.{name} needs a max_length that fits the column ({column.type.length})"


def _sample(name: str):
    declared = typing.get_type_hints(shapes.KeptSendFields)[name]
    [kind] = [t for t in typing.get_args(declared) if t is not type(None)] or [declared]
    return SAMPLES[kind]


@pytest.mark.parametrize("name", KEPT)
def test_a_kept_field_is_stored_and_shown(api, tenant, name):
    value = _sample(name)
    [recipient] = sent_ok(api, tenant, **{name: value})["recipients"]
    assert message(api, tenant, recipient["id"])[name] == value
    # A batch whose entries set it and leave it out (the rows of one INSERT).
    sender = f"app@{tenant.domain}"
    answer = Api.data(api.post(f"{SERVER}/messages/batch", {"messages": [
        {"from": sender, "to": [rcpt()], "text_body": "x", name: value},
        {"from": sender, "to": [rcpt()], "text_body": "x"}]}, server_key=tenant.api_key))
    shown = [message(api, tenant, entry["data"]["recipients"][0]["id"])[name]
             for entry in answer["messages"]]
    assert shown == [value, None]
