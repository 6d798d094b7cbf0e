"""The ranked answer's bytes: the compiled writer (app.api.answer_kernel) gives exactly what
orjson writes for the per-result dicts, for any ids, scores and order; so does the dicts' path
that serves until the kernel is compiled."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.api import answer, body_scan
from app.api.answer import RankedResults, answer_json

ids_strategy = st.one_of(
    st.lists(st.text(), min_size=0, max_size=40, unique=True),
    # Ids the kernel copies a word at a time, escapes (`"`, `\\`, control characters) across
    # the words' edges.
    st.lists(
        st.text(st.sampled_from('ab"\\\x01\u00e9'), min_size=5, max_size=30),
        max_size=40,
        unique=True,
    ),
    st.lists(st.integers(-(2**63), 2**64 - 1), min_size=0, max_size=40, unique=True),
    st.lists(st.one_of(st.text(max_size=5), st.integers(-5, 5)), max_size=40, unique=True),
)
score = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from([0.0, -0.0, 1e-320, 5e-324, 1.7976931348623157e308]),
)


@given(ids=ids_strategy, data=st.data())
@hypothesis_settings(max_examples=300, deadline=None)
def test_the_written_answer_is_what_orjson_writes_for_the_dicts(
    ids: list[Any], data: st.DataObject
) -> None:
    n = len(ids)
    scores = np.array(data.draw(st.lists(score, min_size=n, max_size=n)), dtype=np.float64)
    order = np.array(data.draw(st.permutations(range(n))), dtype=np.int64)
    order = order[: data.draw(st.integers(0, n))]
    results = RankedResults(ids, scores, order)
    head = data.draw(st.sampled_from([{}, {"request_id": 'r"1\\', "model": {"name": "m"}}]))
    tail = data.draw(st.sampled_from([{}, {"degraded": False, "reasons": ["x"], "n": 3}]))
    body = {**head, "results": results, **tail}
    want = orjson.dumps({**head, "results": results.dicts(), **tail})
    assert answer_json(body) == want


def test_the_kernel_path_is_taken_once_compiled() -> None:
    assert body_scan.KERNEL.compile_now() is not None
    results = RankedResults(["a", "b"], np.array([0.5, 2.0]), np.array([1, 0], dtype=np.int64))
    written = answer._written_results(results)
    assert written == b'{"id":"b","score":2.0,"rank":1},{"id":"a","score":0.5,"rank":2}'


def test_before_the_kernel_the_dicts_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_scan.KERNEL, "ready", lambda: None)
    results = RankedResults([3, "x"], np.array([np.nan, 1.0]), np.array([1, 0], dtype=np.int64))
    body = {"request_id": "r", "results": results, "degraded": False}
    want = {"request_id": "r", "results": results.dicts(), "degraded": False}
    assert answer_json(body) == orjson.dumps(want)
    assert b'"score":null' in answer_json(body)


def test_an_id_orjson_cannot_write_is_left_to_the_dicts() -> None:
    results = RankedResults([2**70], np.array([1.0]), np.array([0], dtype=np.int64))
    with pytest.raises(orjson.JSONEncodeError):
        answer_json({"results": results})


def test_a_body_without_ranked_results_is_dumped_as_it_is() -> None:
    body = {"request_id": "r", "results": [{"id": "a", "score": 1.0, "rank": 1}]}
    assert answer_json(body) == orjson.dumps(body)


def test_float32_scores_are_written_as_their_float64_values() -> None:
    """A scorer's float32 scores are shown as the doubles they convert to, as the dicts'
    path writes them (0.1f is 0.10000000149011612), not float32's own shortest form."""
    assert body_scan.KERNEL.compile_now() is not None
    scores = np.array([0.1, 2.5, -1e-3], dtype=np.float32)
    results = RankedResults(["a", "b", "c"], scores, np.array([1, 0, 2], dtype=np.int64))
    body = {"results": results}
    assert answer_json(body) == orjson.dumps({"results": results.dicts()})
    assert b"0.10000000149011612" in answer_json(body)
