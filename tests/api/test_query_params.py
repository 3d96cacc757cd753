"""Query parameters are declared on the endpoint: the OpenAPI document lists them from the
declaration, a handler cannot read an undeclared one, and values are checked against the
declared type and bounds before a handler sees them."""
from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import pytest

from chalicelib import errors
from chalicelib.api import openapi, query
from chalicelib.api.framework import Call


def _call(params: dict, declared: tuple) -> Call:
    return Call(request=SimpleNamespace(query_params=params, headers={}), db=None, params={},
                query_params=declared)


def test_documented_from_the_declaration():
    document = openapi.generate()
    listed = {p["name"]: p for p in document["paths"]["/api/v2/server/messages"]["get"]
              ["parameters"]}
    assert set(listed) == {"page", "per_page", "scope", "status", "tag", "stream", "query",
                           "bounce_category", "from", "to"}
    assert listed["from"]["schema"]["format"] == "date-time"
    assert listed["per_page"]["schema"] == {"type": "integer", "minimum": 1,
                                            "maximum": query.MAX_PER_PAGE}
    assert "Pending" in listed["status"]["schema"]["enum"]
    stats = document["paths"]["/api/v2/server/stats"]["get"]["parameters"]
    assert {p["name"]: p["schema"].get("format") for p in stats} == {"from": "date-time",
                                                                     "to": "date-time"}


def test_a_handler_cannot_read_an_undeclared_parameter():
    call = _call({"tag": "x", "other": "y"}, (query.string("tag", "t"),))
    assert call.query == {"tag": "x"}  # what the client sent beyond the declaration is ignored
    assert call.query_str("tag") == "x"
    with pytest.raises(query.UndeclaredQueryParameter):
        call.query_str("other")
    with pytest.raises(query.UndeclaredQueryParameter):
        _call({}, ()).page_args()


def test_integers_are_held_to_their_declared_bounds():
    call = _call({"page": "0", "per_page": "101"}, query.PAGINATION)
    with pytest.raises(errors.ValidationError, match="page must be at least 1"):
        call.query_int("page")
    with pytest.raises(errors.ValidationError, match="at most 100"):
        call.query_int("per_page")
    huge = _call({"page": str(10**30)}, query.PAGINATION)  # its OFFSET would overflow BIGINT
    with pytest.raises(errors.ValidationError, match="page must be at most"):
        huge.page_args()
    assert _call({}, query.PAGINATION).page_args() == (1, query.DEFAULT_PER_PAGE)


def test_enums_booleans_and_date_times():
    declared = (query.string("status", "s", enum=("Sent", "Held")), query.boolean("held", "h"),
                query.date_time("from", "f"))
    assert _call({"status": "Held"}, declared).query_str("status") == "Held"
    with pytest.raises(errors.ValidationError, match="one of: Sent, Held"):
        _call({"status": "held"}, declared).query_str("status")
    assert _call({"held": "true"}, declared).query_bool("held") is True
    assert _call({}, declared).query_bool("held") is False
    with pytest.raises(errors.ValidationError, match="true or false"):
        _call({"held": "maybe"}, declared).query_bool("held")
    for raw in ("2026-01-31T12:00:00Z", "2026-01-31t12:00:00z", "2026-01-31T13:00:00+01:00",
                "2026-01-31T13:00:00 01:00"):  # '+' arrived as a space
        assert _call({"from": raw}, declared).query_datetime("from") == datetime(2026, 1, 31, 12)
    for raw in ("yesterday", "0001-01-01T00:00:00+01:00"):
        with pytest.raises(errors.ValidationError):
            _call({"from": raw}, declared).query_datetime("from")
