"""Stored templates through real HTTP: save-time refusal with line and column, the render
preview (escaping included), permalinks, archive, and per-server isolation."""
from __future__ import annotations

from tests.support import Api, make_tenant

S = "/api/v2/server"

WELCOME = {
    "name": "Welcome Mail",
    "subject": "Welcome, {{ user.first_name }}!",
    "html_body": "<p>Hi {{ user.first_name }}</p><ul>{{#items}}<li>{{ name }}</li>{{/items}}"
                 "</ul>{{^items}}<p>No items</p>{{/items}}{{! not rendered }}",
    "text_body": "Hi {{ user.first_name }}, {{{ raw }}} {{& raw }}",
}


def create(api, key, body=None, status=201):
    return Api.data(api.post(S + "/templates", body or WELCOME, server_key=key),
                    status)["template"]


def test_create_show_list_and_generated_permalink(api, tenant):
    key = tenant.api_key
    created = create(api, key)
    assert created["permalink"] == "welcome-mail" and created["archived"] is False
    assert created["subject"] == WELCOME["subject"] and created["html_body"] == WELCOME["html_body"]
    # Generated permalinks stay unique per server.
    assert create(api, key)["permalink"] == "welcome-mail-2"
    explicit = create(api, key, {"name": "Reset", "permalink": "password-reset",
                                 "text_body": "Reset: {{ url }}"})
    assert explicit["permalink"] == "password-reset" and explicit["subject"] is None

    shown = Api.data(api.get(S + "/templates/welcome-mail", server_key=key))["template"]
    assert shown == created
    listed = Api.data(api.get(S + "/templates", server_key=key))
    assert [t["permalink"] for t in listed["templates"]] == \
        ["welcome-mail", "welcome-mail-2", "password-reset"]
    assert "html_body" not in listed["templates"][0]  # bodies only on show
    assert listed["pagination"]["total"] == 3

    err = Api.error(api.post(S + "/templates", {**WELCOME, "permalink": "password-reset"},
                             server_key=key), 422, "ValidationError")
    assert err["field"] == "permalink" and "taken" in err["message"]
    err = Api.error(api.post(S + "/templates", {**WELCOME, "permalink": "Not OK"},
                             server_key=key), 422, "ValidationError")
    assert err["field"] == "permalink"


def test_a_template_that_does_not_parse_is_refused_with_line_and_column(api, tenant):
    key = tenant.api_key
    body = {"name": "Broken", "subject": "ok",
            "html_body": "<p>line one</p>\n<p>{{#items}}\n  {{ name }}\n"}
    err = Api.error(api.post(S + "/templates", body, server_key=key), 422, "ValidationError")
    assert err["field"] == "html_body"
    assert "line 2, column 4" in err["message"] and "items" in err["message"]

    err = Api.error(api.post(S + "/templates", {"name": "B", "subject": "Hi {{ name",
                                                "text_body": "x"}, server_key=key),
                    422, "ValidationError")
    assert err["field"] == "subject" and "line 1, column 4" in err["message"]

    # Partials and delimiter changes are outside the subset (partials would read files).
    for source, column in (("a {{> ../../etc/passwd }}", 3), ("{{=<% %>=}}", 1)):
        err = Api.error(api.post(S + "/templates", {"name": "P", "html_body": source},
                                 server_key=key), 422, "ValidationError")
        assert err["field"] == "html_body" and f"line 1, column {column}" in err["message"]

    err = Api.error(api.post(S + "/templates", {"name": "Empty", "subject": "s"},
                             server_key=key), 422, "ValidationError")
    assert err["field"] == "html_body"
    Api.error(api.post(S + "/templates", {"html_body": "x"}, server_key=key), 400,
              "ParameterMissing")
    # Nothing was stored by the refused requests.
    assert Api.data(api.get(S + "/templates", server_key=key))["templates"] == []


def test_render_preview_escapes_html_and_sends_nothing(api, tenant):
    key = tenant.api_key
    create(api, key)
    model = {"user": {"first_name": "<script>alert('x')</script>"},
             "items": [{"name": "A & B"}, {"name": "\"quoted\""}], "raw": "<b>bold</b>"}
    rendered = Api.data(api.post(S + "/templates/welcome-mail/render",
                                 {"template_model": model}, server_key=key))
    assert set(rendered) == {"subject", "html_body", "text_body"}
    assert rendered["subject"] == "Welcome, <script>alert('x')</script>!"  # plain text
    assert "<script>" not in rendered["html_body"]
    assert rendered["html_body"] == (
        "<p>Hi &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</p>"
        "<ul><li>A &amp; B</li><li>&quot;quoted&quot;</li></ul>")
    assert rendered["text_body"] == \
        "Hi <script>alert('x')</script>, <b>bold</b> <b>bold</b>"

    # Missing variables render empty; an empty list takes the inverted section.
    empty = Api.data(api.post(S + "/templates/welcome-mail/render", {}, server_key=key))
    assert empty == {"subject": "Welcome, !", "html_body": "<p>Hi </p><ul></ul><p>No items</p>",
                     "text_body": "Hi ,  "}

    err = Api.error(api.post(S + "/templates/welcome-mail/render", {"template_model": [1]},
                             server_key=key), 422, "ValidationError")
    assert err["field"] == "template_model"
    Api.error(api.post(S + "/templates/nope/render", {}, server_key=key), 404, "NotFound")


def test_render_preview_of_unsaved_parts_stores_nothing(api, tenant):
    key = tenant.api_key
    create(api, key)
    path = S + "/templates/welcome-mail"
    saved = Api.data(api.get(path, server_key=key))["template"]
    rendered = Api.data(api.post(path + "/render", {
        "template_model": {"name": "<Ada>"}, "html_body": "<h1>Draft for {{name}}</h1>",
        "subject": "Draft {{ name }}"}, server_key=key))
    assert rendered["html_body"] == "<h1>Draft for &lt;Ada&gt;</h1>"  # escaped as when saved
    assert rendered["subject"] == "Draft <Ada>"
    assert rendered["text_body"] == Api.data(api.post(path + "/render", {
        "template_model": {"name": "<Ada>"}}, server_key=key))["text_body"]  # the saved one
    assert Api.data(api.get(path, server_key=key))["template"] == saved  # nothing stored
    err = Api.error(api.post(path + "/render", {"text_body": "Hi {{#open}}"}, server_key=key),
                    422, "ValidationError")
    assert err["field"] == "text_body" and "line 1" in err["message"]
    err = Api.error(api.post(path + "/render", {"subject": "two\nlines"}, server_key=key),
                    422, "ValidationError")
    assert err["field"] == "subject"


def test_render_is_bounded(api, tenant):
    key = tenant.api_key
    # Nested sections over a list multiply: 200^4 copies would be gigabytes.
    bomb = "{{#a}}{{#a}}{{#a}}{{#a}}xxxxxxxxxx{{/a}}{{/a}}{{/a}}{{/a}}"
    create(api, key, {"name": "Bomb", "html_body": bomb})
    err = Api.error(api.post(S + "/templates/bomb/render",
                             {"template_model": {"a": list(range(200))}}, server_key=key),
                    422, "ValidationError")
    assert err["field"] == "template_model"


def test_update_revalidates_and_archive_hides_the_template(api, tenant):
    key = tenant.api_key
    create(api, key)
    err = Api.error(api.patch(S + "/templates/welcome-mail", {"text_body": "ok\n{{/x}}"},
                              server_key=key), 422, "ValidationError")
    assert err["field"] == "text_body" and "line 2, column 1" in err["message"]
    updated = Api.data(api.patch(S + "/templates/welcome-mail",
                                 {"subject": "Hello {{ user.first_name }}", "html_body": None,
                                  "permalink": "welcome"}, server_key=key))["template"]
    assert updated["permalink"] == "welcome" and updated["html_body"] is None
    assert updated["text_body"] == WELCOME["text_body"]
    Api.error(api.get(S + "/templates/welcome-mail", server_key=key), 404, "NotFound")
    # Clearing the last body is refused.
    err = Api.error(api.patch(S + "/templates/welcome", {"text_body": None}, server_key=key),
                    422, "ValidationError")
    assert err["field"] == "html_body"
    rendered = Api.data(api.post(S + "/templates/welcome/render",
                                 {"template_model": {"user": {"first_name": "Ann"}}},
                                 server_key=key))
    assert rendered["subject"] == "Hello Ann" and rendered["html_body"] is None

    archived = Api.data(api.post(S + "/templates/welcome/archive", server_key=key))["template"]
    assert archived["archived"] is True and archived["archived_at"]
    assert Api.data(api.get(S + "/templates", server_key=key))["templates"] == []
    with_archived = Api.data(api.get(S + "/templates?include_archived=true", server_key=key))
    assert [t["permalink"] for t in with_archived["templates"]] == ["welcome"]
    assert Api.data(api.get(S + "/templates/welcome", server_key=key))["template"]["archived"]
    Api.error(api.post(S + "/templates/welcome/render", {}, server_key=key), 404, "NotFound")
    Api.error(api.patch(S + "/templates/welcome", {"name": "x"}, server_key=key), 422,
              "ValidationError")
    Api.error(api.post(S + "/templates/nope/archive", server_key=key), 404, "NotFound")


def test_templates_are_per_server(api, tenant):
    other = make_tenant(api)
    create(api, tenant.api_key, {"name": "Mine", "text_body": "x"})
    Api.error(api.get(S + "/templates/mine", server_key=other.api_key), 404, "NotFound")
    Api.error(api.post(S + "/templates/mine/render", {}, server_key=other.api_key), 404,
              "NotFound")
    assert create(api, other.api_key, {"name": "Mine", "text_body": "y"})["permalink"] == "mine"
    Api.error(api.get(S + "/templates"), 401, "Unauthorized")


def test_unarchive_brings_the_template_back_for_renders(api, tenant):
    key = tenant.api_key
    create(api, key)
    Api.data(api.post(S + "/templates/welcome-mail/archive", server_key=key))
    Api.error(api.post(S + "/templates/welcome-mail/render", {}, server_key=key), 404,
              "NotFound")
    back = Api.data(api.post(S + "/templates/welcome-mail/unarchive",
                             server_key=key))["template"]
    assert back["archived"] is False and back["archived_at"] is None
    assert Api.data(api.post(S + "/templates/welcome-mail/render", {}, server_key=key))
    names = [t["permalink"] for t in Api.data(api.get(S + "/templates",
                                                      server_key=key))["templates"]]
    assert names == ["welcome-mail"]
