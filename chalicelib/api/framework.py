"""The thin HTTP layer: one decorator turns a plain function into a Chalice route that
authenticates, parses and validates the body, runs in one database transaction, and answers
in the spec's envelope. Every error leaves here as ``{status: error, error: {code, message}}``.

A handler looks like::

    @endpoint(bp, "/organizations", "POST", auth=ADMIN, body=OrganizationIn, status=201)
    def create_organization(call: Call):
        return {"organization": records.organization(organizations.create(call.db, ...))}
"""
from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Callable
from urllib.parse import unquote

from chalice import Blueprint, Response
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy import Select, func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from chalicelib import errors, observability
from chalicelib.api import json_body, query
from chalicelib.api.auth import authenticate
from chalicelib.api.errors import status_for
from chalicelib.api.query import QueryParam  # by name: Call.query (a property) hides the module
from chalicelib.api.principal import ADMIN, NONE, SERVER, SERVER_READ, SESSION, Principal  # noqa: F401  (handlers import them from here)
from chalicelib.config import get_settings
from chalicelib.db import session_scope
from chalicelib.services.sending import idempotency

log = logging.getLogger(__name__)

INTEGER_PARAMS = {"id", "user_id", "pool_id"}
MAX_ID = 2**63 - 1  # BIGINT; a larger id would overflow the database driver, not just miss
DEFAULT_PER_PAGE = query.DEFAULT_PER_PAGE
MAX_PER_PAGE = query.MAX_PER_PAGE


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.replace(microsecond=0).isoformat() + "Z"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, BaseModel):
        return value.model_dump()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def json_response(payload: dict, status: int, headers: dict | None = None) -> Response:
    body = json.dumps(payload, default=_json_default, separators=(",", ":"))
    return Response(body=body, status_code=status,
                    headers={"Content-Type": "application/json", **(headers or {})})


def data_json(data: Any) -> str:
    return json.dumps(data, default=_json_default, separators=(",", ":"))


def success_from_json(data_text: str, status: int, started: float,
                      headers: dict | None = None) -> Response:
    """The envelope around ``data`` already serialized (an idempotent replay)."""
    body = '{"status":"success","time":%s,"data":%s}' % (
        json.dumps(round(time.perf_counter() - started, 4)), data_text)
    return Response(body=body, status_code=status,
                    headers={"Content-Type": "application/json", **(headers or {})})


def success(data: Any, status: int, started: float, headers: dict | None = None) -> Response:
    return json_response({"status": "success", "time": round(time.perf_counter() - started, 4),
                          "data": data}, status, headers)


def failure(code: str, message: str, started: float, *, field_name: str | None = None,
            status: int | None = None, headers: dict | None = None) -> Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if field_name:
        error["field"] = field_name
    return json_response({"status": "error", "time": round(time.perf_counter() - started, 4),
                          "error": error}, status or status_for(code), headers)


@dataclass
class Call:
    """Everything a handler needs about the request it serves."""

    request: Any
    db: Session
    params: dict[str, Any]
    body: Any = None
    principal: Principal | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    status: int | None = None  # set by a handler whose answer's status varies (dry runs)
    query_params: tuple[QueryParam, ...] = ()

    @property
    def headers(self):
        return self.request.headers

    @property
    def query(self) -> dict[str, str]:
        """The declared query parameters the client sent (others are ignored)."""
        declared = {p.name for p in self.query_params}
        params = {}
        for name, value in (self.request.query_params or {}).items():
            if "\x00" in name or "\x00" in value:
                raise errors.ValidationError(f"{name}: must not contain NUL characters",
                                             field=name)
            if name in declared:
                params[name] = value
        return params

    def _declared(self, name: str) -> QueryParam:
        for param in self.query_params:
            if param.name == name:
                return param
        raise query.UndeclaredQueryParameter(f"query parameter {name!r} is not declared on "
                                             "this endpoint (@endpoint(..., query=...))")

    def query_str(self, name: str) -> str | None:
        """The parameter's value (checked against its enum, if it has one); None if absent
        or empty."""
        return query.parse_choice(self._declared(name), self.query.get(name))

    @property
    def ip_address(self) -> str | None:
        forwarded = self.request.headers.get("x-forwarded-for")
        if forwarded:
            return forwarded.split(",")[0].strip()
        return (self.request.context.get("identity") or {}).get("sourceIp")

    @property
    def user_agent(self) -> str | None:
        return self.request.headers.get("user-agent")

    @property
    def server(self):
        return self.principal.server if self.principal else None

    def query_int(self, name: str, default: int | None = None) -> int | None:
        """The integer parameter within its declared minimum and maximum (else a 422)."""
        schema = self._declared(name).schema
        return query.parse_int(name, self.query.get(name), default, schema.get("minimum"),
                               schema.get("maximum"))

    def query_bool(self, name: str) -> bool:
        self._declared(name)
        return query.parse_bool(name, self.query.get(name))

    def query_datetime(self, name: str) -> datetime | None:
        self._declared(name)
        return query.parse_datetime(name, self.query.get(name))

    def page_args(self) -> tuple[int, int]:
        return self.query_int("page", 1), self.query_int("per_page", DEFAULT_PER_PAGE)


def paginate(db: Session, stmt: Select, page: int, per_page: int) -> tuple[list, dict]:
    """Run ``stmt`` for one page; returns (rows, the pagination object of every list answer)."""
    total = db.scalar(select(func.count()).select_from(stmt.order_by(None).subquery())) or 0
    rows = list(db.scalars(stmt.limit(per_page).offset((page - 1) * per_page)))
    pages = (total + per_page - 1) // per_page
    return rows, {"page": page, "per_page": per_page, "total": total, "total_pages": pages}


def _field_path(loc: tuple) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    return path


def validation_error_from(exc: PydanticValidationError, prefix: str = "") -> errors.ServiceError:
    """The first pydantic error as our error: absent fields are ParameterMissing, the rest
    ValidationError, and the message always names the field."""
    first = exc.errors()[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    name = _field_path(((prefix,) if prefix else ()) + loc) or "body"
    if first["type"] == "missing":
        return errors.ParameterMissing(f"{name} is required", field=name)
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    return errors.ValidationError(f"{name}: {message}", field=name)


def _nul_path(value: Any, path: str = "") -> str | None:
    """Where a NUL character sits in parsed JSON (PostgreSQL text cannot store one), or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return path or "body"
            found = _nul_path(item, child)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def parse_body(raw: bytes | None, model: type[BaseModel] | None,
               array_field: str | None = None) -> Any:
    """The JSON object body, validated by ``model``. With ``array_field``, a bare JSON array
    stands for ``{array_field: [...]}`` (the batch routes, as third-party SDKs send them)."""
    if not raw or not raw.strip():
        data: Any = {}
    else:
        try:
            data = json_body.loads(raw)  # depth and number limits (a 422 past them)
        except errors.ValidationError as exc:
            observability.log("request.bad_json", "warning", error=str(exc)[:200])
            raise
    if array_field and isinstance(data, list):
        data = {array_field: data}
    if not isinstance(data, dict):
        raise errors.ValidationError("request body must be a JSON object")
    nul_at = _nul_path(data)
    if nul_at is not None:
        raise errors.ValidationError(f"{nul_at or 'body'}: must not contain NUL characters",
                                     field=nul_at or None)
    if model is None:
        return data
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise validation_error_from(exc) from None


def _path_params(raw: dict[str, str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, value in raw.items():
        value = unquote(value)
        if "\x00" in value:  # no stored name or token holds one
            raise errors.NotFound(f"no resource with {name} {value!r}")
        if name in INTEGER_PARAMS:
            try:
                params[name] = int(value)
            except ValueError:
                raise errors.NotFound(f"no resource with {name} {value!r}") from None
            if not 1 <= params[name] <= MAX_ID:
                raise errors.NotFound(f"no resource with {name} {value!r}")
        else:
            params[name] = value
    return params


def _id_out_of_range(exc: DBAPIError, raw_params: dict[str, str]) -> bool:
    """PostgreSQL refused an integer path id as out of range for its (32-bit) column: no row
    can have that id. SQLSTATE 22003 = numeric_value_out_of_range."""
    detail = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
    state = detail.get("C") if isinstance(detail, dict) else getattr(exc.orig, "pgcode", None)
    return state == "22003" and any(
        name in INTEGER_PARAMS and value.lstrip("-").isdigit() and int(value) > 2**31 - 1
        for name, value in raw_params.items())


@dataclass(frozen=True)
class EndpointInfo:
    """What the OpenAPI document is generated from: the same models the handlers validate."""

    blueprint: Blueprint
    path: str
    method: str
    auth: str
    body: type[BaseModel] | None
    status: int
    raw: bool
    summary: str
    name: str
    query: tuple[query.QueryParam, ...] = ()
    array_field: str | None = None
    response: type | None = None  # the shape of ``data`` (a chalicelib/response_shapes TypedDict)
    idempotent: bool = False


ENDPOINTS: list[EndpointInfo] = []

# Tests set this to check every success answer against the endpoint's declared response
# shape (tests/response_check.py); it raises on a mismatch, which answers 500.
response_check: Callable[[EndpointInfo, Response], None] | None = None


def endpoint(bp: Blueprint, path: str, method: str = "GET", *, auth: str,
             body: type[BaseModel] | None = None, status: int = 200,
             raw: bool = False, query: tuple = (), array_field: str | None = None,
             response: type | None = None, idempotent: bool = False) -> Callable:
    """Register ``fn(call, **path_params)`` as a route. ``fn`` returns the ``data`` object
    (or a chalice Response when ``raw`` is true, for the few routes outside the envelope).
    ``query``: the query parameters it reads (api/query.py). ``array_field``: the body may
    also be a bare JSON array, read as ``{array_field: [...]}``. ``response``: the shape of
    the ``data`` it answers with (chalicelib/response_shapes; the OpenAPI document describes it).
    ``idempotent``: the route honours an ``Idempotency-Key`` header
    (services/sending/idempotency.py; server routes only)."""
    query_params = tuple(query)

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def view(**raw_params: str) -> Response:
            started = time.perf_counter()
            request = bp.current_request
            try:
                if len(request.raw_body or b"") > get_settings().max_request_bytes:
                    raise errors.PayloadTooLarge(
                        f"request body exceeds {get_settings().max_request_bytes} bytes")
                with session_scope() as db:
                    # Who is asking comes first: an unauthenticated caller learns nothing
                    # about the body's validity or the existence of ids.
                    principal = authenticate(auth, request, db)
                    params = _path_params(raw_params)
                    # A raw route without a body model reads its own body (a form post).
                    payload = parse_body(request.raw_body, body, array_field) \
                        if method in ("POST", "PATCH", "PUT") and (body or not raw) else None
                    call = Call(request=request, db=db, params=params, body=payload,
                                principal=principal, query_params=query_params)
                    key = idempotency_key(request, principal) if idempotent else None
                    if key is not None:
                        replay = idempotency.begin(
                            db, principal.server.id, key,
                            idempotency.request_hash(method, path, request.raw_body))
                        if replay is not None:
                            return success_from_json(replay.data_json, replay.status, started,
                                                     {idempotency.REPLAY_HEADER: "true"})
                    result = fn(call, **params)
                    if key is not None:  # the answer commits with what the handler wrote
                        answer = data_json(result)
                        idempotency.complete(db, principal.server.id, key,
                                             call.status or status, answer)
                if raw:
                    return result
                if key is not None:
                    answer = success_from_json(answer, call.status or status, started,
                                               call.extra_headers or None)
                else:
                    answer = success(result, call.status or status, started,
                                     call.extra_headers or None)
                if response_check is not None:
                    response_check(info, answer)
                return answer
            except errors.ServiceError as exc:
                return failure(exc.code, exc.message, started, field_name=exc.field,
                               headers=exc.headers)
            except StaleDataError:
                # The row was deleted by a concurrent request between our read and our write
                # (a PATCH racing a DELETE): for this request it is gone.
                return failure("NotFound", "the record was deleted meanwhile; nothing was "
                               "changed", started)
            except DBAPIError as exc:
                if _id_out_of_range(exc, raw_params):
                    return failure("NotFound", "no resource with that id", started)
                log.exception("unhandled database error in %s %s", method, path)
                return failure("InternalError", "internal error; the request was not applied",
                               started)
            except Exception:  # noqa: BLE001  (never a stack trace to the client)
                log.exception("unhandled error in %s %s", method, path)
                return failure("InternalError", "internal error; the request was not applied",
                               started)

        bp.route(path, methods=[method], content_types=["*/*"])(view)
        info = EndpointInfo(bp, path, method, auth, body, status, raw,
                            (fn.__doc__ or fn.__name__).strip().splitlines()[0],
                            fn.__name__, query_params, array_field, response,
                            idempotent)
        ENDPOINTS.append(info)
        return fn

    return decorate


def idempotency_key(request, principal: Principal | None) -> str | None:
    """The request's Idempotency-Key (checked), or None; only a server's key scopes one."""
    if principal is None or principal.server is None:
        return None
    return idempotency.check_key(request.headers.get(idempotency.HEADER.lower()))


def envelope_middleware(event: Any, get_response: Callable) -> Response:
    """Chalice's own errors (405, 415, its 500) in our envelope too."""
    started = time.perf_counter()
    try:
        response = get_response(event)
    except Exception:  # noqa: BLE001
        log.exception("unhandled error outside a handler")
        return failure("InternalError", "internal error", started)
    body = response.body
    if response.status_code >= 400 and isinstance(body, dict) and "Code" in body:
        code = {"MethodNotAllowedError": "MethodNotAllowed",
                "UnsupportedMediaType": "UnsupportedMediaType",
                "BadRequest": "ValidationError"}.get(body["Code"], "InternalError")
        return failure(code, str(body.get("Message", "")), started, status=response.status_code,
                       headers={k: v for k, v in response.headers.items()
                                if k.lower() == "allow"})
    return response
