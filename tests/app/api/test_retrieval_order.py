"""The byte scan that answers shed requests agrees with a full JSON parse, or declines: the
compiled walk (app.api.ids_kernel) and the numpy path that serves until it is compiled."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.api import retrieval_order
from app.api.body_marks import BodyMarks
from app.api.request_matrix import RequestError
from app.api.retrieval_order import fallback_ids, split_candidates
from app.settings import Settings

pytestmark = pytest.mark.usefixtures("shed_path")  # every test on both paths


def split_ids(raw: bytes) -> tuple[dict[str, Any], list[Any]] | None:
    """split_candidates without the ids' bytes."""
    split = split_candidates(raw)
    return None if split is None else split[:2]


def full_parse(raw: bytes) -> tuple[dict[str, Any], list[Any]]:
    doc = orjson.loads(raw)
    cands = doc.pop("candidates")
    return doc, [c["id"] for c in cands]


@pytest.mark.parametrize(
    "body",
    [
        {"candidates": [{"id": "a", "features": [1, 2]}, {"id": 7, "features": [None, 3.5]}]},
        {
            "request_id": "r-1",
            "user": {"id": "id", "profile": {"id": "x", "features": 3}},
            "candidates": [{"features": {"bm25": 1, "ctr": 2}, "id": "b"}],
            "top_k": 1,
        },
        {"candidates": [{"id": "ü-ß", "features": [[1], {"k": "}]"}]}], "model": "m"},
        {"candidates": [], "query_id": "candidates"},
        # Bytes that share the brackets' bit pattern (Y _ y DEL), inside and outside strings.
        {"candidates": [{"id": "Y_y\x7f", "features": {"_Y": 1, "y": [2]}}], "top_k": 1},
        {"top_k": 3, "candidates": [{"id": -12, "features": []}, {"id": "c", "features": [1e300]}]},
    ],
)
def test_scan_matches_the_full_parse(body: dict[str, Any]) -> None:
    for raw in (orjson.dumps(body), orjson.dumps(body, option=orjson.OPT_INDENT_2)):
        split = split_candidates(raw)
        assert split is not None and split[:2] == full_parse(raw)
        tokens = split[2]
        if tokens is not None:  # the compiled walk's copy: the same ids as the body wrote them
            written = tokens.buf[tokens.begin : tokens.end].tobytes()
            assert orjson.loads(b"[" + written + b"]") == split[1]
            assert tokens.count == len(split[1])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"candidates": [{"id": "a\\"b", "features": []}]}',  # escapes: the scan declines
        b'{"candidates": [1, {"id": "a", "features": []}]}',  # not an object
        b'{"candidates": [{"features": []}]}',  # no id
        b'{"candidates": [{"id": null, "features": []}]}',
        b'{"candidates": [], "candidates": []}',
        b'{"candidates": {"id": "a"}}',
        b'{"candidates": [{"id": 1.5}]}',  # not an integer: the full parse rejects it
        b'{"candidates": [{"id": 1e3}]}',
        b'{"candidates": [{"id": 01}]}',
        b'{"candidates": [{"id": true}]}',
        b'{"candidates": [{"id": 1}, , {"id": 2}]}',  # not JSON
        b'{"candidates": [{"id": 1} {"id": 2}]}',
        b'{"candidates": [{"id": 1}, {"id": 2},]}',
        b'{"candidates": [{"id": 1, "id": 2}]}',  # two ids
        b'{"candidates": [{"id": 1}, "x"]}',
        b'{"candidates": [{"id": 1}, [2]]}',
        b'{"model": "m"}',  # no candidates
        b'{"candidates": [], "user": {"id": "u"}, "candidates": []}',
        b'[{"candidates": []}]',
    ],
)
def test_scan_declines_what_it_cannot_be_sure_of(raw: bytes) -> None:
    assert split_candidates(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"candidates": [{"id": "a\\"b", "features": []}, {"id": "c", "features": []}]}',
        b'{"candidates": [{"id": "a", "features": {"x\\\\": 1}}, {"id": "c"}]}',
        b'{"request_id": "r\\u0031", "candidates": [{"id": "a"}]}',
    ],
)
def test_an_escape_is_declined_with_admissions_marks_too(raw: bytes) -> None:
    # The scan skips its own search for backslashes when given the outline admission made,
    # which is only ever made of a body without them.
    marks = BodyMarks.outline(raw)
    assert marks.complete
    assert split_candidates(raw, marks) is None


def test_an_outline_gives_the_same_split_as_no_marks() -> None:
    raw = orjson.dumps({"candidates": [{"id": f"d{i}", "features": [i, None]} for i in range(50)]})
    marks = BodyMarks.outline(raw)
    split = split_candidates(raw, marks)
    assert split is not None and split[:2] == full_parse(raw)


def test_an_id_that_reads_like_the_key_is_right_or_declined() -> None:
    raw = b'{"candidates": [{"id": "id", "features": []}, {"features": [], "id": "id2"}]}'
    assert split_ids(raw) in (None, full_parse(raw))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"candidates": [{"id": 1}}',  # a mismatched bracket
        b'{"candidates": [{"id": "a"}]',  # unclosed
        b'{"candidates": [{"id": "a"}]}}',
        b'{"candidates": [{"id": "a"}]} x',
        b'{"candidates":[{"id":"a","features":{"bm25":1.0}}]}xyz',
        b'{"candidates":[{"id":"a"}],"query":{"features":{"hour":-Infinity}}}',
        b'{"candidates": [{"id": "a", "features": {"x": [1, {"y": 2}]]}',  # features unclosed
        b'{"candidates": [{"id": "a", "features": {"x": "}]"',
    ],
)
def test_a_body_that_is_not_json_gets_the_parsers_error(raw: bytes) -> None:
    _parsers_error(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"candidates": [{"id": "a", "features": {"x": [1}]}]}',
        b'{"candidates": [{"id": "a", "features": [{"x": 1]}]}]}',
    ],
)
def test_mismatched_brackets_in_a_candidate_get_the_parsers_error(
    raw: bytes, shed_path: str
) -> None:
    """The compiled walk follows the kinds of brackets inside a candidate; the vectorised
    path, which serves only until that is compiled, counts them."""
    if shed_path == "kernel":
        _parsers_error(raw)
    else:
        assert split_ids(raw) in (None, ({}, ["a"]))


def test_features_nested_past_the_walks_depth_are_parsed() -> None:
    raw = b'{"candidates": [{"id": "a", "features": ' + b"[" * 70 + b"]" * 70 + b"}]}"
    assert split_ids(raw) in (None, ({}, ["a"]))
    assert fallback_ids(raw, Settings())[1] == ["a"]


def _parsers_error(raw: bytes) -> None:
    """The error, if any, is the full parser's, positions included (a trial found the
    envelope's, without the candidates, with positions the client could not find)."""
    with pytest.raises(orjson.JSONDecodeError) as parsed:
        orjson.loads(raw)
    expected = f"invalid JSON: {parsed.value}"
    try:
        assert split_candidates(raw) is None
    except RequestError as exc:
        assert (exc.type, exc.msg) == ("json_invalid", expected)
    with pytest.raises(RequestError) as info:
        fallback_ids(raw, Settings())
    assert (info.value.type, info.value.msg) == ("json_invalid", expected)


def test_fallback_checks_ids_and_envelope() -> None:
    settings = Settings(max_candidates=2)
    envelope, ids = fallback_ids(b'{"candidates": [{"id": "id", "features": []}]}', settings)
    assert ids == ["id"] and envelope.top_k is None  # declined by the scan, parsed in full
    for raw, kind in [
        (b'{"candidates": [{"id": "a"}, {"id": "a"}]}', "duplicate_id"),
        (b'{"candidates": [{"id": 1}, {"id": 2}, {"id": 3}]}', "too_long"),
        (b'{"candidates": [{"id": 1.5}]}', "id_type"),
        (b'{"candidates": [{"id": 18446744073709551616}]}', "id_type"),
        (b'{"candidates": 3}', "list_type"),
    ]:
        with pytest.raises(RequestError) as info:
            fallback_ids(raw, settings)
        assert info.value.type == kind
        if kind == "id_type":  # as the full parse says it
            assert "at most 64 bits" in str(info.value)
    with pytest.raises(ValueError, match="request_id"):
        fallback_ids(b'{"request_id": "a\\nb", "candidates": [{"id": 1}]}', settings)


ids = st.one_of(st.text(max_size=8), st.integers(-(2**40), 2**40))
finite = st.floats(allow_nan=False, allow_infinity=False)
values = st.one_of(st.none(), finite, st.integers(-99, 99))
features = st.one_of(
    st.lists(values, max_size=4), st.dictionaries(st.sampled_from(["id", "a", "b"]), values)
)
candidate = st.fixed_dictionaries({"id": ids, "features": features})
envelope = st.fixed_dictionaries(
    {},
    optional={
        "request_id": st.text(max_size=6),
        "top_k": st.integers(1, 5),
        "user": st.fixed_dictionaries({"id": ids, "profile": st.dictionaries(st.text(), ids)}),
    },
)


@hypothesis_settings(max_examples=200, deadline=None)
@given(envelope=envelope, candidates=st.lists(candidate, max_size=6), indent=st.booleans())
def test_scan_is_right_or_declines(
    envelope: dict[str, Any], candidates: list[dict[str, Any]], indent: bool
) -> None:
    raw = orjson.dumps(
        {**envelope, "candidates": candidates}, option=orjson.OPT_INDENT_2 if indent else 0
    )
    got = split_ids(raw)
    if got is not None:
        assert got == full_parse(raw)


def test_compact_string_ids_take_the_vectorised_path(
    monkeypatch: pytest.MonkeyPatch, shed_path: str
) -> None:
    def no_slow_path(*args: Any) -> None:
        raise AssertionError("the per-id loop ran for a compact body of string ids")

    monkeypatch.setattr(retrieval_order, "_id_values", no_slow_path)
    cands = [{"id": i, "features": [1, None]} for i in ["a,b", "ü}", "", "x:y", "[1]"]]
    raw = orjson.dumps({"model": "m", "candidates": cands})
    assert split_ids(raw) == full_parse(raw)


_KEYS = st.sampled_from(["id", "candidates", "features", "x"]) | st.text(max_size=3)
_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 2**40) | st.floats(allow_nan=False) | _KEYS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    envelope=st.dictionaries(_KEYS, _ANY, max_size=3),
    candidates=st.lists(_ANY | st.dictionaries(_KEYS, _ANY, max_size=3), max_size=4),
    indent=st.booleans(),
)
def test_any_json_is_right_or_declined(
    envelope: dict[str, Any], candidates: list[Any], indent: bool
) -> None:
    raw = orjson.dumps(
        {**envelope, "candidates": candidates}, option=orjson.OPT_INDENT_2 if indent else 0
    )
    got = split_ids(raw)
    if got is not None:
        assert all(type(c) is dict for c in candidates)
        assert got == full_parse(raw)


class _Model:
    name, version = "m", "v1"


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    # Long ids too: the compiled path copies them eight bytes a word.
    ids=st.lists(st.one_of(ids, st.text(min_size=6, max_size=40)), max_size=30, unique=True),
    top_k=st.one_of(st.none(), st.integers(1, 40)),
    indent=st.booleans(),
)
def test_the_shed_answer_is_what_orjson_writes(
    ids: list[Any], top_k: int | None, indent: bool
) -> None:
    """From the ids' own bytes (compiled path) or from the dicts: the same bytes."""
    raw = orjson.dumps(
        {"candidates": [{"id": i, "features": [1.5]} for i in ids], "top_k": top_k},
        option=orjson.OPT_INDENT_2 if indent else 0,
    )
    split = retrieval_order._split(raw, None)
    if split is None:
        return
    got_ids, raw_ids = split[1], split[2]
    assert got_ids == ids
    assert (raw_ids is not None) == (retrieval_order.KERNEL.ready() is not None)
    got = retrieval_order.fallback_body("r-1", _Model(), got_ids, raw_ids, top_k, "shed")
    want = {
        "request_id": "r-1",
        "model": {"name": "m", "version": "v1"},
        "results": [{"id": i, "score": None, "rank": r} for r, i in enumerate(ids[:top_k], 1)],
        "degraded": True,
        "reasons": ["shed"],
    }
    assert got == orjson.dumps(want)


def test_minus_zero_is_left_to_orjson() -> None:
    raw = b'{"candidates": [{"id": -0}, {"id": 5}]}'
    assert split_ids(raw) in (None, ({}, [0, 5]))


def test_a_large_rest_of_the_body_is_left_to_the_full_parse() -> None:
    """The early item walk decodes the body without its candidates on the event loop: one of
    2,000,000 query features (32 MB) held it for seconds. Past the limit it declines."""
    candidates = [{"id": f"d{i}", "features": [1.0] * 20} for i in range(50)]
    raw = orjson.dumps({"query": {"features": {"q": 1.0}}, "candidates": candidates})
    assert split_candidates(raw, max_envelope_bytes=64) is not None
    assert split_candidates(raw, max_envelope_bytes=20) is None
