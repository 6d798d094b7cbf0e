from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.request_matrix import (
    RequestError,
    TokenBudget,
    build_matrix,
    decode_body,
    token_budget,
)

NAMES = ["a", "b", "c"]


def build(candidates, **kw):
    return build_matrix(candidates, NAMES, **kw)


def error_of(candidates, **kw) -> RequestError:
    with pytest.raises(RequestError) as info:
        build(candidates, **kw)
    return info.value


def test_lists_become_a_float32_matrix_with_null_as_nan() -> None:
    out = build([{"id": "x", "features": [1, 2.5, None]}, {"id": 7, "features": [0, -1, 3]}])
    assert out.ids == ["x", 7]
    assert out.features.dtype == np.float32
    np.testing.assert_array_equal(out.features, [[1, 2.5, np.nan], [0, -1, 3]])


def test_maps_fill_by_name_and_absent_names_are_missing() -> None:
    out = build(
        [
            {"id": "x", "features": {"c": 3, "a": 1}},
            {"id": "y", "features": {"b": 2}},
            {"id": "z", "features": {"c": 30, "a": 10}},
            {"id": "w", "features": [4, 5, 6]},
        ]
    )
    np.testing.assert_array_equal(
        out.features, [[1, np.nan, 3], [np.nan, 2, np.nan], [10, np.nan, 30], [4, 5, 6]]
    )


def test_extra_columns_are_appended_as_nan() -> None:
    out = build([{"id": "x", "features": [1, 2, 3]}], extra_columns=2)
    assert out.features.shape == (1, 5)
    assert np.isnan(out.features[0, 3:]).all()


def test_values_beyond_float32_become_infinite() -> None:
    out = build([{"id": "x", "features": [1e39, -1e300, 2**64]}])
    assert out.features[0, 0] == np.inf and out.features[0, 1] == -np.inf
    assert out.features[0, 2] == np.float32(2**64)


C = ["body", "candidates"]
C0 = [*C, 0]
F0 = [*C0, "features"]


def one(features: object) -> list[dict]:
    return [{"id": "x", "features": features}]


@pytest.mark.parametrize(
    ("candidates", "loc", "kind"),
    [
        (None, C, "missing"),
        ({"id": "x"}, C, "list_type"),
        ([], C, "too_short"),
        (["x"], C0, "value_error"),
        ([{"features": [1, 2, 3]}], [*C0, "id"], "missing"),
        ([{"id": "x"}], F0, "missing"),
        ([{"id": "x", "features": [1, 2, 3], "f": 1}], [*C0, "f"], "value_error"),
        ([{"id": 1.5, "features": [1, 2, 3]}], [*C0, "id"], "id_type"),
        ([{"id": True, "features": [1, 2, 3]}], [*C0, "id"], "id_type"),
        (one([1, 2]), F0, "feature_count"),
        (one("1,2,3"), F0, "features_type"),
        (one([1, True, 3]), [*F0, 1], "float_type"),
        (one([1, 2, "3"]), [*F0, 2], "float_type"),
        (one([[1], 2, 3]), [*F0, 0], "float_type"),
        (one([{}, 2, 3]), [*F0, 0], "float_type"),
        (one({"b": False}), [*F0, "b"], "float_type"),
        (one({"zz": 1}), [*F0, "zz"], "unknown_feature"),
    ],
)
def test_bad_candidates_are_named_precisely(candidates, loc, kind) -> None:
    err = error_of(candidates)
    assert err.detail()[0]["loc"] == loc
    assert err.type == kind


def test_the_offending_candidate_is_found_among_many() -> None:
    good = [{"id": i, "features": [1.0, 2.0, 3.0]} for i in range(500)]
    good[321]["features"] = [1.0, "high", 3.0]
    err = error_of(good)
    assert err.loc == ("body", "candidates", 321, "features", 1)
    assert "'high'" in err.msg


def test_duplicate_ids_name_both_positions() -> None:
    err = error_of([{"id": n, "features": [1, 2, 3]} for n in ["p", "q", "p"]])
    assert err.loc == ("body", "candidates", 2, "id")
    assert "candidates[0]" in err.msg


def test_candidate_count_limits() -> None:
    cands = [{"id": i, "features": [1, 2, 3]} for i in range(5)]
    assert error_of(cands, max_candidates=4).type == "too_long"
    assert error_of(cands, min_candidates=6).type == "too_short"
    assert build(cands, max_candidates=5).features.shape == (5, 3)


def test_unknown_names_can_be_ignored() -> None:
    out = build([{"id": "x", "features": {"a": 1, "zz": 9, "c": 3}}], ignore_unknown=True)
    np.testing.assert_array_equal(out.features, [[1, np.nan, 3]])
    out = build([{"id": "x", "features": {"zz": 9}}], ignore_unknown=True)
    assert np.isnan(out.features).all()


def test_decode_body_wants_a_json_object() -> None:
    assert decode_body(b'{"a": 1}') == {"a": 1}
    for bad in (b"", b"{", b"[1]", b"NaN", b"\xff\xfe", b'"x"'):
        with pytest.raises(RequestError):
            decode_body(bad)


number = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.lists(number, min_size=3, max_size=3), min_size=1, max_size=20),
    as_map=st.lists(st.booleans(), min_size=20, max_size=20),
)
def test_matrix_equals_a_value_by_value_conversion(rows, as_map) -> None:
    candidates = []
    for i, row in enumerate(rows):
        if as_map[i]:
            feats = {n: v for n, v in zip(NAMES, row, strict=True) if v is not None}
        else:
            feats = row
        candidates.append({"id": f"d{i}", "features": feats})
    # Through JSON, as the service receives it.
    out = build(orjson.loads(orjson.dumps(candidates)))
    with np.errstate(over="ignore"):
        expected = np.array(
            [[math.nan if v is None else np.float32(v) for v in row] for row in rows],
            dtype=np.float32,
        )
    np.testing.assert_array_equal(out.features, expected)


json_junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def outcome(candidates, budget=None):
    try:
        out = build(candidates, budget=budget)
    except RequestError as err:
        assert err.msg and err.loc[:2] == ("body", "candidates")
        orjson.dumps(err.detail())
        return ("error", err.loc, err.type)
    assert out.features.shape == (len(out.ids), 3)
    return ("ok", out.ids, out.features.tobytes())


@settings(max_examples=150, deadline=None)
@given(junk=json_junk, explain=st.booleans())
def test_junk_gives_a_request_error_and_the_budget_changes_nothing(junk, explain) -> None:
    for candidates in (junk, [junk], [{"id": "x", "features": junk}]):
        body = orjson.dumps({"explain": explain, "candidates": candidates})
        doc = orjson.loads(body)
        parsed = doc.pop("candidates")
        assert outcome(parsed, token_budget(body, doc)) == outcome(parsed)


def test_the_budget_sees_booleans_and_strings_only_where_they_are() -> None:
    def budget_of(doc):
        body = orjson.dumps(doc)
        envelope = orjson.loads(body)
        envelope.pop("candidates")
        budget = token_budget(body, envelope)
        assert budget is not None
        return (budget.strings, budget.bools)

    clean = {"explain": True, "user": {"id": "true"}, "candidates": [{"id": "a", "features": [1]}]}
    assert budget_of({**clean, "user": {"id": "u"}}) == (3, 0)  # "id", "features", "a"
    assert budget_of(clean) == (3, 1)  # the id "true" reads as a literal: no fast path
    with_bool = {"candidates": [{"id": 1, "features": [True]}]}
    assert budget_of(with_bool) == (2, 1)
    with_str = {"candidates": [{"id": 1, "features": ["1.5"]}]}
    assert budget_of(with_str) == (3, 0)  # "id", "features" and the value
    assert token_budget(b'{"candidates": [], "q": "a\\"b"}', {"q": 'a"b'}) is None
    # Fooled by nothing: a budget claiming numbers still rejects a nested list.
    budget = token_budget(b'{"candidates": [{"id": 1, "features": [[1], [2], [3]]}]}', {})
    assert budget == TokenBudget(2, 0)
    err = error_of([{"id": 1, "features": [[1], [2], [3]]}], budget=budget)
    assert err.type == "float_type" and err.loc[-1] == 0
