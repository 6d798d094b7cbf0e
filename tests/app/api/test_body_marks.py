"""A body's quotes and brackets, found once; admission's row count read from them (compiled,
and by numpy until that is compiled)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api import ids_kernel, marks_kernel, retrieval_order
from app.api.body_marks import BodyMarks, estimated_rows

pytestmark = pytest.mark.usefixtures("shed_path")  # every test on both paths


def test_the_kernels_codes_are_the_callers() -> None:
    assert (ids_kernel.OK, ids_kernel.N_IDS, ids_kernel.OUT_LEN) == (
        retrieval_order.OK,
        retrieval_order.N_IDS,
        retrieval_order.OUT_LEN,
    )
    assert (ids_kernel.ARRAY_OPEN, ids_kernel.ARRAY_CLOSE) == (
        retrieval_order.ARRAY_OPEN,
        retrieval_order.ARRAY_CLOSE,
    )


def rows(body: bytes) -> int:
    return estimated_rows(BodyMarks.of(body))


def test_rows_are_counted_from_the_raw_body() -> None:
    body = b'{"candidates": [{"id": 1, "features": [1]}, {"id": 2, "features": {"a": 1}}]}'
    assert rows(body) == 2
    assert rows(b"{}") == 1
    # Candidates by id alone (features from the item store) count too.
    assert rows(b'{"candidates": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}') == 3


_KEYS = st.sampled_from(["id", "features", "ids", "x", 'id"', "features\\"])
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | _KEYS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS | st.text(), inner),
    max_leaves=30,
)


def test_the_users_id_is_not_a_row() -> None:
    candidates = [{"id": f"d{i}", "features": [1.0]} for i in range(1000)]
    body = orjson.dumps({"user": {"id": "u1"}, "candidates": candidates})
    assert rows(body) == 1000
    # Candidates without features (the item store supplies them), a query's features.
    ids_only = [{"id": i} for i in range(5)]
    body = orjson.dumps(
        {"query": {"features": {"a": 1}}, "user": {"id": 7}, "candidates": ids_only}
    )
    assert rows(body) == 5


def _strings_three_deep(value: Any, depth: int = 0) -> list[str]:
    """The strings (keys and values) directly in containers three deep."""
    if isinstance(value, dict):
        here = [*value, *(v for v in value.values() if isinstance(v, str))]
        nested = value.values()
    elif isinstance(value, list):
        here = [v for v in value if isinstance(v, str)]
        nested = value
    else:
        return []
    found = list(here) if depth + 1 == 3 else []
    for v in nested:
        found += _strings_three_deep(v, depth + 1)
    return found


@given(_JSON)
def test_rows_are_the_keys_three_deep_else_every_key_in_any_json(value: Any) -> None:
    body = orjson.dumps(value)
    every = max(body.count(b'"id"'), body.count(b'"features"'), 1)
    if b"\\" in body:  # escaped quotes: the count is an estimate, never below 1
        assert 1 <= rows(body) <= max(every, 1)
        return
    deep = _strings_three_deep(value)
    in_rows = max(deep.count("id"), deep.count("features"))
    assert rows(body) == (in_rows if in_rows > 0 else every)


@given(st.binary(max_size=200))
def test_marks_are_every_quote_and_bracket(raw: bytes) -> None:
    marks = BodyMarks.of(raw)
    special = [i for i, b in enumerate(raw) if b in b'"[]{}']
    assert [i for i in marks.marks.tolist() if raw[i] in b'"[]{}'] == special
    assert set(raw[i] for i in marks.marks.tolist()) <= set(b'"[]{}Y_y\x7f')
    np.testing.assert_array_equal(marks.quotes(), [i for i, b in enumerate(raw) if b == 34])


def _numpy_marks(body: bytes) -> np.ndarray:
    data = np.frombuffer(body, dtype=np.uint8)
    return np.flatnonzero(((data & 0xD9) == 0x59) | (data == 34))


# Bytes weighted towards the marks and their neighbours under the mask (the words the
# eight-at-a-time test must not miss nor invent).
_BYTES = st.lists(
    st.one_of(
        st.sampled_from(b'"[]{}Y_y\x7f\x22\x5b\x58\x5a\x19\xd9\x00\xff0 ,:'), st.integers(0, 255)
    ),
    max_size=300,
).map(bytes)


@given(_BYTES)
def test_marks_are_every_quote_and_bracket_byte(body: bytes) -> None:
    np.testing.assert_array_equal(BodyMarks.of(body).marks, _numpy_marks(body))


_VECTOR_PASS = marks_kernel.compile_find_marks()


@pytest.mark.parametrize("find_marks", [ids_kernel.find_marks, _VECTOR_PASS], ids=["numba", "llvm"])
@settings(deadline=None)  # numba compiles its pass on the first call in a fresh checkout
@given(body=_BYTES)
def test_the_compiled_passes_find_every_mark_and_report_a_short_buffer(
    find_marks: Any, body: bytes
) -> None:
    expected = _numpy_marks(body)
    data = np.frombuffer(body, dtype=np.uint8)
    out = np.empty(max(expected.size - 1, 0), dtype=np.int64)
    assert find_marks(data, out) == (-1 if expected.size else 0)
    room = np.empty(expected.size, dtype=np.int64)
    assert find_marks(data, room) == expected.size
    np.testing.assert_array_equal(room, expected)


@pytest.mark.parametrize(
    "scan",
    [_VECTOR_PASS, marks_kernel.compile_find_structure(), ids_kernel.find_marks],
    ids=["marks", "structure", "numba"],
)
def test_the_passes_give_the_gil_up_while_they_run(scan: Any) -> None:
    """They run on the event loop's thread for every large body, and under overload the request
    threads' decodes and scorings wait for the GIL meanwhile (app.api.marks_kernel)."""
    data = np.full(64 * 2**20, ord("1"), dtype=np.uint8)  # no marks: milliseconds of scanning
    out = np.empty(16, dtype=np.int64)
    assert scan(data, out) == 0  # compiled now, not while counting
    counted = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    interval = sys.getswitchinterval()
    # Longer than the scan: holding the GIL, this thread would not be made to give it up.
    sys.setswitchinterval(0.5)
    counter = threading.Thread(target=count)
    counter.start()
    try:
        time.sleep(0.01)  # the counter counts; this thread then waits to take the GIL back
        before = counted[0]
        for _ in range(3):  # a busy machine may not run the counter in one pass: holding the
            scan(data, out)  # GIL, no pass lets it count at all
            if counted[0] > before:
                break
        assert counted[0] > before
    finally:
        stop.set()
        counter.join()
        sys.setswitchinterval(interval)


@given(st.integers(0, 200), st.integers(0, 96))
def test_the_vector_pass_reads_whole_blocks_then_the_tail(length: int, where: int) -> None:
    """A mark in any lane of a 32-byte block, or in the bytes after the last whole block."""
    body = bytearray(b"0" * length)
    if where < length:
        body[where] = ord("[")
    data = np.frombuffer(bytes(body), dtype=np.uint8)
    out = np.empty(4, dtype=np.int64)
    found = _VECTOR_PASS(data, out)
    assert out[:found].tolist() == ([where] if where < length else [])


def test_the_vector_pass_serves_when_compiled(shed_kernels: Any) -> None:
    assert shed_kernels.find_marks.__module__ == marks_kernel.__name__


def test_a_body_of_marks_only_is_found_whole() -> None:
    body = b'"' * 1001  # more marks than the compiled pass's buffer holds: numpy finds them
    np.testing.assert_array_equal(BodyMarks.of(body).marks, np.arange(1001))


def test_marks_of_dense_and_small_bodies_one_after_another() -> None:
    # One mark in ten bytes (the compiled pass's buffer holds one in four), then smaller and
    # empty bodies, then the dense one again: no state carries over from one body to the next.
    rng = np.random.default_rng(5)
    dense = bytes(rng.choice(np.frombuffer(b'"0123456789', dtype=np.uint8), 200_000))
    for body in (dense, b'{"candidates": [{"id": "a"}]}', dense[:50_000], b"", dense):
        np.testing.assert_array_equal(BodyMarks.of(body).marks, _numpy_marks(body))
