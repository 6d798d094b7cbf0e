"""A body's outline (the brackets outside strings, the quotes at most three deep) gives
admission's row count and the shed path's ids exactly as every mark does."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api import marks_kernel, outline_kernel
from app.api.body_marks import BodyMarks, estimated_rows
from app.api.ids_kernel import scan_ids

_FIND_STRUCTURE = marks_kernel.compile_find_structure()


def _structure(body: bytes) -> list[int] | int:
    """The bracket bytes outside strings, by the quotes' running parity; -2 when the body ends
    inside a string, -3 when it holds a backslash."""
    if b"\\" in body:
        return -3
    inside, found = False, []
    for i, byte in enumerate(body):
        if byte == 34:
            inside = not inside
        elif not inside and byte & 0xD9 == 0x59:
            found.append(i)
    return -2 if inside else found


_BYTES = st.lists(st.sampled_from(b'"[]{}Y_y\x7f\\a0 ,:') | st.integers(0, 255), max_size=300).map(
    bytes
)


@settings(deadline=None)
@given(_BYTES)
def test_the_vector_pass_finds_the_brackets_outside_strings(body: bytes) -> None:
    data = np.frombuffer(body, dtype=np.uint8)
    out = np.empty(len(body) + 1, dtype=np.int64)
    found = _FIND_STRUCTURE(data, out)
    expected = _structure(body)
    assert (found if found < 0 else out[:found].tolist()) == expected
    if isinstance(expected, list) and expected:  # one slot short
        assert _FIND_STRUCTURE(data, np.empty(len(expected) - 1, dtype=np.int64)) == -1


@given(st.integers(0, 100), st.integers(0, 100))
def test_a_string_carries_over_from_block_to_block(length: int, opened: int) -> None:
    """A string that opens in one 32-byte block hides the brackets in the next ones."""
    body = bytearray(b"[" * length)
    if opened < length:
        body[opened] = ord('"')
        body += b'"'
    found = _structure(bytes(body))
    data = np.frombuffer(bytes(body), dtype=np.uint8)
    out = np.empty(len(body) + 1, dtype=np.int64)
    got = _FIND_STRUCTURE(data, out)
    assert isinstance(found, list) and out[:got].tolist() == found


_KEYS = st.sampled_from(["id", "features", "candidates", "x", "}", "[a"]) | st.text(max_size=3)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 2**40) | st.floats(allow_nan=False) | _KEYS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=30,
)
_CANDIDATE = st.fixed_dictionaries(
    {"id": st.text(max_size=4) | st.integers(-5, 5)},
    optional={"features": st.lists(st.floats(allow_nan=False), max_size=3) | _JSON},
)


def _walk(body: BodyMarks) -> tuple[int, bytes, list[int]]:
    raw = body.raw
    out = np.zeros(len(raw) + 2, dtype=np.uint8)
    starts = np.zeros(len(raw) // 8 + 2, dtype=np.int64)
    result = np.zeros(4, dtype=np.int64)
    status = scan_ids(body.data, body.marks, out, starts, result)
    return status, out[: result[1]].tobytes(), result.tolist()


def _same_as_every_mark(raw: bytes) -> None:
    outline, every = BodyMarks.outline(raw), BodyMarks.of(raw)
    assert estimated_rows(outline) == estimated_rows(every)
    if b"\\" not in raw:
        assert _walk(outline) == _walk(every)


@pytest.mark.usefixtures("shed_kernels")
@settings(deadline=None, max_examples=300)
@given(
    envelope=st.dictionaries(_KEYS, _JSON, max_size=3),
    candidates=st.lists(_CANDIDATE | _JSON, max_size=5),
    indent=st.booleans(),
)
def test_rows_and_ids_from_the_outline_are_those_of_every_mark(
    envelope: dict[str, Any], candidates: list[Any], indent: bool
) -> None:
    option = orjson.OPT_INDENT_2 if indent else 0
    _same_as_every_mark(orjson.dumps({**envelope, "candidates": candidates}, option=option))


@pytest.mark.usefixtures("shed_kernels")
@settings(deadline=None)
@given(_BYTES)
def test_any_bytes_give_the_rows_of_every_mark(raw: bytes) -> None:
    _same_as_every_mark(raw)


@pytest.mark.usefixtures("shed_kernels")
def test_named_features_leave_a_few_marks_per_candidate() -> None:
    names = {f"feature_{j}": j / 7 for j in range(100)}
    candidates = [{"id": f"d{i}", "features": names} for i in range(50)]
    raw = orjson.dumps({"model": "m", "candidates": candidates})
    outline = BodyMarks.outline(raw)
    assert not outline.complete
    # Per candidate: its braces, the features' braces, the id key and value, the features key.
    assert len(outline.marks) <= 50 * 10 + 10 < len(BodyMarks.of(raw).marks) / 20
    assert estimated_rows(outline) == 50


@pytest.mark.usefixtures("shed_kernels")
def test_long_strings_near_the_top_take_every_mark() -> None:
    """The bytes between brackets are read one by one; where they are most of the body (a
    long string three deep or less), the vector pass over every mark serves instead."""
    raw = orjson.dumps({"note": "x" * 100_000, "candidates": [{"id": 1}]})
    data = np.frombuffer(raw, dtype=np.uint8)
    brackets = np.array(_structure(raw), dtype=np.int64)
    out = np.empty(len(raw), dtype=np.int64)
    assert outline_kernel.outline_marks(data, brackets, out, len(raw) // 4) == -1
    assert BodyMarks.outline(raw).complete
    assert estimated_rows(BodyMarks.outline(raw)) == 1


@pytest.mark.usefixtures("shed_kernels")
def test_escapes_or_an_open_string_take_every_mark() -> None:
    assert BodyMarks.outline(b'{"candidates": [{"id": "a\\"b"}]}').complete
    assert BodyMarks.outline(b'{"candidates": [{"id": "a}]}').complete
