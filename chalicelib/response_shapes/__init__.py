"""Record shapes of every answer: which fields a record has and of what type. The builders of
the records use them (``@builds``), the endpoints declare the ``data`` they answer with them
(``@endpoint(..., response=...)``), and the OpenAPI document describes every answer from them
(api/openapi.py turns them into JSON schemas with pydantic), so the document cannot drift
from the code.

A shape is a ``TypedDict`` marked ``@record`` (no extra fields: ``additionalProperties:
false`` in the document). A key marked ``NotRequired`` appears only in some answers (a key
shown once); every other key is always present, maybe null. TypedDicts rather than pydantic
models: creating a class costs microseconds, not a millisecond, and these are all created
when ``app`` is imported (the Lambda cold start); nothing validates against them at run time
but the key check of ``@builds``.

``@builds(Shape)`` checks the keys of every record the builder returns: a builder that adds a
field the shape lacks, or leaves out a required one, fails the first test that touches it.
Types are checked in the tests, on every answer of the running stack, against the OpenAPI
document (tests/response_check.py), and by schemathesis.

Modules: ``messaging`` (messages, deliveries, events, streams, templates …), ``stats``,
``management`` (organizations, servers, domains, credentials, webhooks …), ``accounts``
(users, sessions, memberships, invitations).
"""
import functools
import typing
from typing import Any, Callable, TypeVar

from pydantic import ConfigDict, with_config
from typing_extensions import NotRequired, Required, TypedDict

Shape = TypeVar("Shape", bound=type)
_FORBID = ConfigDict(extra="forbid")
_KEYS: dict[type, tuple[frozenset[str], frozenset[str]]] = {}


def record(cls: Shape) -> Shape:
    """Mark a TypedDict as an answer's record: no key outside it is allowed."""
    return with_config(_FORBID)(cls)


def keys(shape: type) -> tuple[frozenset[str], frozenset[str]]:
    """(every key, the required keys) of a shape, as JSON spells them (``from_`` is "from")."""
    found = _KEYS.get(shape)
    if found is None:
        hints = typing.get_type_hints(shape, include_extras=True)

        def json_name(name: str) -> str:
            hint = hints[name]
            while typing.get_origin(hint) in (NotRequired, Required):
                hint = typing.get_args(hint)[0]
            for meta in getattr(hint, "__metadata__", ()):
                alias = getattr(meta, "alias", None)
                if alias:
                    return alias
            return name

        found = (frozenset(json_name(n) for n in hints),
                 frozenset(json_name(n) for n in shape.__required_keys__))
        _KEYS[shape] = found
    return found


def check(shape: type, data: dict) -> dict:
    """``data`` unchanged if its keys fit ``shape``, else TypeError naming them."""
    allowed, required = keys(shape)
    present = data.keys()
    if not (present <= allowed and required <= present):
        raise TypeError(f"{shape.__name__} record does not match its shape: fields not in the "
                        f"shape {sorted(present - allowed)}, required fields missing "
                        f"{sorted(required - present)}")
    return data


def builds(shape: type) -> Callable:
    """Mark ``fn`` as the builder of ``shape`` records: what it returns is checked."""

    def decorate(fn: Callable[..., dict]) -> Callable[..., dict]:
        @functools.wraps(fn)
        def build(*args: Any, **kwargs: Any) -> dict:
            return check(shape, fn(*args, **kwargs))

        build.shape = shape  # type: ignore[attr-defined]
        return build

    return decorate


@record
class Pagination(TypedDict):
    page: int
    per_page: int
    total: int
    total_pages: int


_ANSWERS: dict[str, tuple[dict, type]] = {}


def _answer(name: str, fields: dict[str, Any], doc: str) -> type:
    """One named answer shape per name (the same name from two places must be the same)."""
    existing = _ANSWERS.get(name)
    if existing is not None:
        if existing[0] != fields:
            raise TypeError(f"two different answers are both named {name}")
        return existing[1]
    shape = record(TypedDict(name, fields))  # type: ignore[operator]
    shape.__doc__ = doc
    _ANSWERS[name] = (fields, shape)
    return shape


def one(key: str, shape: type, name: str | None = None) -> type:
    """``{key: record}``: the answer of show, create and update."""
    return _answer(name or f"{shape.__name__}Answer", {key: shape},
                   f"data of an answer with one {shape.__name__} under {key!r}.")


def page(key: str, shape: type, name: str | None = None) -> type:
    """``{key: [record], pagination}``: a list answer."""
    return _answer(name or f"{shape.__name__}Page",  # a type built at run time:
                   {key: list[shape], "pagination": Pagination},  # type: ignore[valid-type]
                   f"data of a page of {shape.__name__} records under {key!r}.")


def deleted(key: str, shape: type, name: str | None = None) -> type:
    """``{key: record, deleted: true}``: the answer of a DELETE (the record as it was)."""
    return _answer(name or f"{shape.__name__}Deleted", {key: shape, "deleted": bool},
                   f"data of a DELETE: the {shape.__name__} as it was, and deleted: true.")
