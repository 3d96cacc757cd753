"""The bounded JSON parser: depth measured without recursion, numbers bounded as parsed."""
from __future__ import annotations

import pytest

from chalicelib import errors
from chalicelib.api.json_body import MAX_DEPTH, MAX_NUMBER, loads, nesting_depth_exceeds


def test_depth_counts_objects_and_arrays_but_not_brackets_in_strings():
    assert not nesting_depth_exceeds(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert nesting_depth_exceeds(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert nesting_depth_exceeds(b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1))
    assert not nesting_depth_exceeds(b'["' + b"[{" * 500 + b'"]')
    assert not nesting_depth_exceeds(b'["\\"' + b"[" * 500 + b'"]')  # escaped quote
    assert not nesting_depth_exceeds(b"[" + b"[{}]," * 5000 + b"[]]")  # wide, not deep


def test_limits_answer_validation_errors():
    with pytest.raises(errors.ValidationError, match="deeper than"):
        loads(b"[" * 100000)
    for raw in (b"[1e400]", b"[-1e400]", b"[" + str(MAX_NUMBER + 1).encode() + b"]",
                b"[1" + b"0" * 10000 + b"]"):
        with pytest.raises(errors.ValidationError, match="outside the range"):
            loads(raw)
    for raw in (b"[NaN]", b"[Infinity]", b"[-Infinity]"):
        with pytest.raises(errors.ValidationError, match="not valid JSON"):
            loads(raw)
    with pytest.raises(errors.ValidationError, match="UTF-8"):
        loads(b'["\xc3"]')


def test_ordinary_bodies_parse_as_before():
    assert loads(b'{"a": [1, -2.5, 9223372036854775807, "\\u00e9", null, true]}') == \
        {"a": [1, -2.5, MAX_NUMBER, "é", None, True]}
