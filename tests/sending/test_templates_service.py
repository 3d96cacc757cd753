"""services/sending/templates.py and services/sending/streams.py called directly, on the test database."""
from __future__ import annotations

import pytest

from chalicelib import errors
from chalicelib.db.models import Organization
from chalicelib.services.organizations import organizations
from chalicelib.services.sending import streams, templates
from tests.support import unique


@pytest.fixture
def server(db):
    org = Organization(name="Org", permalink=unique("org"))
    db.add(org)
    db.flush()
    return organizations.create_server(db, org, name="Main")


def test_permalinks_are_generated_from_the_name_and_unique_per_server(db, server):
    first = templates.create(db, server, name="Order Shipped!", text_body="x")
    second = templates.create(db, server, name="Order Shipped!", text_body="x")
    odd = templates.create(db, server, name="***", text_body="x")
    assert (first.permalink, second.permalink, odd.permalink) == \
        ("order-shipped", "order-shipped-2", "item")
    with pytest.raises(errors.ValidationError) as exc:
        templates.create(db, server, name="x", permalink="order-shipped", text_body="x")
    assert exc.value.field == "permalink"


def test_validation_names_the_part_with_line_and_column(db, server):
    with pytest.raises(errors.ValidationError) as exc:
        templates.create(db, server, name="x", subject="ok", html_body="a\nb {{#s}}",
                         text_body="fine")
    assert exc.value.field == "html_body"
    assert exc.value.message.startswith("html_body: line 2, column 3: ")
    with pytest.raises(errors.ValidationError) as exc:
        templates.create(db, server, name="x", html_body="<p>", text_body="{{ a }} {{/b}}")
    assert exc.value.field == "text_body" and "line 1, column 9" in exc.value.message
    with pytest.raises(errors.ValidationError) as exc:
        templates.create(db, server, name="x", subject="two\nlines", text_body="x")
    assert exc.value.field == "subject"


def test_update_applies_only_present_fields_and_keeps_a_body(db, server):
    tpl = templates.create(db, server, name="T", subject="S {{a}}", html_body="<b>{{a}}</b>")
    templates.update(db, server, tpl, {"text_body": "{{a}}"})
    assert (tpl.subject, tpl.html_body, tpl.text_body) == ("S {{a}}", "<b>{{a}}</b>", "{{a}}")
    templates.update(db, server, tpl, {"html_body": None})
    assert tpl.html_body is None
    with pytest.raises(errors.ValidationError):
        templates.update(db, server, tpl, {"text_body": ""})
    assert tpl.text_body == "{{a}}"  # a refused update changes nothing
    # Renaming to its own permalink is not a clash.
    templates.update(db, server, tpl, {"permalink": tpl.permalink, "name": "New"})
    assert tpl.name == "New"


def test_render_and_archived_templates(db, server):
    tpl = templates.create(db, server, name="R", subject="Hi {{ n }}",
                           html_body="<i>{{ n }}</i> {{{ n }}}", text_body="{{ n }}")
    out = templates.render(tpl, {"n": "<x>"})
    assert out == {"subject": "Hi <x>", "html_body": "<i>&lt;x&gt;</i> <x>", "text_body": "<x>"}
    assert templates.render(tpl, None)["subject"] == "Hi "
    with pytest.raises(errors.ValidationError) as exc:
        templates.render(tpl, ["not", "a", "dict"])
    assert exc.value.field == "template_model"

    templates.archive(tpl)
    first_archived_at = tpl.archived_at
    templates.archive(tpl)
    assert tpl.archived_at == first_archived_at
    assert templates.find(db, server, "r") is tpl
    with pytest.raises(errors.NotFound):
        templates.find_usable(db, server, "r")
    with pytest.raises(errors.ValidationError):
        templates.update(db, server, tpl, {"name": "again"})


def test_streams_archive_rules(db, server):
    default = streams.find(db, server, "outbound")
    assert default.is_default and default.stream_type == "transactional"
    broadcast = streams.create(db, server, name="Promo", stream_type="broadcast")
    assert broadcast.permalink == "promo" and not broadcast.is_default
    streams.archive(broadcast)
    assert broadcast.archived_at is not None
    with pytest.raises(errors.ValidationError):
        streams.archive(default)
    assert default.archived_at is None
    with pytest.raises(errors.ValidationError) as exc:
        streams.update(broadcast, {"stream_type": "transactional"})
    assert exc.value.field == "stream_type"


def stale_first_look(monkeypatch, module) -> set:
    """``module._taken`` answers "free" the first time it is asked about each permalink: the
    look ran before a concurrent request's insert of that permalink committed. Returns the
    permalinks asked about (clear it to start over)."""
    real, asked = module._taken, set()

    def stale(db, server, permalink, **kw):
        if permalink not in asked:
            asked.add(permalink)
            return False
        return real(db, server, permalink, **kw)

    monkeypatch.setattr(module, "_taken", stale)
    return asked


@pytest.mark.parametrize("module", [templates, streams], ids=["template", "stream"])
def test_a_lost_permalink_race(db, server, monkeypatch, module):
    """The unique index decides: a permalink asked for is a ValidationError naming the field,
    one made up from the name becomes the next free one; the session stays usable."""
    body = {"text_body": "x"} if module is templates else {}
    first = module.create(db, server, name="Race", **body)
    asked = stale_first_look(monkeypatch, module)
    with pytest.raises(errors.ValidationError) as exc:
        module.create(db, server, name="Other", permalink=first.permalink, **body)
    assert exc.value.field == "permalink" and "taken" in exc.value.message
    asked.clear()
    assert module.create(db, server, name="Race", **body).permalink == "race-2"
    assert module.find(db, server, "race").id == first.id
