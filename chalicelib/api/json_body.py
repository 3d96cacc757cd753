"""Request bodies parsed with limits, before any validation sees them.

The standard library's parser recurses once per nesting level: a body of a few thousand
``{"a":`` raised RecursionError (a 500 and a traceback per request), and anything it returned
is walked recursively again later (NUL check, pydantic). So the depth is measured first,
without recursion, and numbers are bounded as they are parsed: a 4,000-digit integer or 1e400
(infinity) would otherwise reach a database driver as an overflow. The byte size is bounded
before this (MAX_REQUEST_BYTES, a 413).
"""
from __future__ import annotations

import json
import math
import re
from array import array
from itertools import accumulate
from typing import Any

from chalicelib import errors

MAX_DEPTH = 64              # objects and arrays inside each other; our deepest schema needs 4
MAX_NUMBER = 2**63 - 1      # BIGINT; no field of ours holds more

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # skipped: brackets in strings do not count
_OTHER_BYTES = bytes(b for b in range(256) if b not in b"[]{}")
_AS_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 / -1 as signed bytes


def nesting_depth_exceeds(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether objects/arrays nest deeper than ``limit`` (malformed input is left to the
    parser). No Python-level loop over the body: strip strings, keep only brackets as +1/-1,
    and the running sum (in C) is the depth."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    steps = array("b", _STRING.sub(b"", raw).translate(_AS_STEPS, _OTHER_BYTES))
    return max(accumulate(steps), default=0) > limit


def _number_error(text: str) -> errors.ValidationError:
    shown = text if len(text) <= 40 else text[:20] + "…"
    return errors.ValidationError(
        f"request body holds the number {shown}, outside the range this API accepts "
        f"(finite, at most {MAX_NUMBER} in size)")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 19:  # before int(): 10**4300 digits cost real CPU to convert
        raise _number_error(text)
    value = int(text)
    if abs(value) > MAX_NUMBER:
        raise _number_error(text)
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_NUMBER:
        raise _number_error(text)
    return value


def _parse_constant(text: str) -> float:
    raise errors.ValidationError(f"request body is not valid JSON: {text} is not a JSON value")


def loads(raw: bytes) -> Any:
    """The parsed body, or a ValidationError saying what is wrong with it."""
    if nesting_depth_exceeds(raw):
        raise errors.ValidationError(
            f"request body nests objects or arrays deeper than {MAX_DEPTH} levels")
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    except UnicodeDecodeError as exc:
        raise errors.ValidationError(
            f"request body is not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_parse_constant)
    except ValueError as exc:
        raise errors.ValidationError(f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # not reachable past the depth check; kept as a last guard
        raise errors.ValidationError(
            f"request body nests objects or arrays deeper than {MAX_DEPTH} levels") from None
