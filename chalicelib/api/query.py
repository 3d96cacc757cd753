"""Query-string parameters: declared on each endpoint (``@endpoint(..., query=...)``), read
through ``Call`` and listed in the OpenAPI document from the same declaration.

A handler can only read what its endpoint declares: asking for another name raises
``UndeclaredQueryParameter`` (a programming error, answered as a 500 and caught by the tests
that reach every route), so the document cannot miss a parameter a handler reads. Undeclared
parameters a client sends are ignored, as most APIs do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from chalicelib import errors

DEFAULT_PER_PAGE = 25
MAX_PER_PAGE = 100
MAX_PAGE = 10**9  # far past any real list, and its OFFSET still fits a BIGINT
MAX_INT32 = 2**31 - 1  # ids of INTEGER columns

_TRUE, _FALSE = ("1", "true", "yes"), ("", "0", "false", "no")


class UndeclaredQueryParameter(LookupError):
    """A handler read a query parameter its endpoint does not declare."""


@dataclass(frozen=True)
class QueryParam:
    name: str
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})

    def openapi(self) -> dict[str, Any]:
        return {"name": self.name, "in": "query", "required": False,
                "description": self.description, "schema": self.schema}


def string(name: str, description: str, *, enum: tuple[str, ...] | None = None) -> QueryParam:
    return QueryParam(name, description,
                      {"type": "string", "enum": list(enum)} if enum else {"type": "string"})


def integer(name: str, description: str, *, minimum: int | None = None,
            maximum: int | None = None) -> QueryParam:
    schema: dict[str, Any] = {"type": "integer"}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return QueryParam(name, description, schema)


def boolean(name: str, description: str) -> QueryParam:
    return QueryParam(name, description + " (true or false; default false)",
                      {"type": "boolean"})


def date_time(name: str, description: str) -> QueryParam:
    return QueryParam(name, description + " (ISO 8601, e.g. 2026-01-31T12:00:00Z)",
                      {"type": "string", "format": "date-time"})


PAGINATION = (
    integer("page", "Page number, from 1 (default 1).", minimum=1, maximum=MAX_PAGE),
    integer("per_page", f"Items per page (default {DEFAULT_PER_PAGE}).", minimum=1,
            maximum=MAX_PER_PAGE),
)


def parse_int(name: str, raw: str | None, default: int | None, minimum: int | None,
              maximum: int | None) -> int | None:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise errors.ValidationError(f"{name} must be an integer", field=name) from None
    if minimum is not None and value < minimum:
        raise errors.ValidationError(f"{name} must be at least {minimum}", field=name)
    if maximum is not None and value > maximum:
        raise errors.ValidationError(f"{name} must be at most {maximum}", field=name)
    return value


def parse_bool(name: str, raw: str | None) -> bool:
    value = (raw or "").lower()
    if value in _FALSE:
        return False
    if value in _TRUE:
        return True
    raise errors.ValidationError(f"{name} must be true or false", field=name)


def parse_datetime(name: str, raw: str | None) -> datetime | None:
    """A naive UTC datetime; an offset (or Z) is applied. A '+' that arrived as a space (an
    unencoded query string) is read back as '+'."""
    if not raw:
        return None
    text = raw.strip().replace(" ", "+")
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    if len(text) > 10 and text[10] in "tT":  # RFC 3339 allows a lower-case t
        text = text[:10] + "T" + text[11:]
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise errors.ValidationError(
            f"{name} must be an ISO 8601 date-time such as 2026-01-31T12:00:00Z", field=name
        ) from None
    if value.tzinfo is not None:
        try:
            value = (value - (value.utcoffset() or timedelta(0))).replace(tzinfo=None)
        except OverflowError:
            raise errors.ValidationError(f"{name} is out of range", field=name) from None
    return value


def parse_choice(param: QueryParam, raw: str | None) -> str | None:
    if raw in (None, ""):
        return None
    allowed = param.schema.get("enum")
    if allowed and raw not in allowed:
        raise errors.ValidationError(f"{param.name} must be one of: {', '.join(allowed)}",
                                     field=param.name)
    return raw
