"""The compiled body scan (app.api.body_scan) against orjson and the float32 cast it stands in
for: the same envelope, ids and bits for every value it reads, NaN, infinities and signed
zeros included, in any JSON layout; and it never reads a body orjson refuses."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.api import body_scan
from app.api.body_scan import (
    ABSENT,
    BYTE_DIGITS,
    NULL,
    WORD_DIGITS,
    ScannedCandidates,
    digit_form,
    fnv1a,
    name_table,
    scan_body,
    scanned_matrix,
)
from app.api.request_matrix import RequestError, build_matrix
from app.api.word_form import WordForm


@pytest.fixture(scope="module", autouse=True)
def kernel() -> object:
    body_scan.WORD_KERNEL.compile_now()
    return body_scan.KERNEL.compile_now()


# Both forms of the scan's digit loops (digit by digit, eight a word), whatever a body's
# sample would pick.
FORMS = pytest.mark.parametrize("form", [BYTE_DIGITS, WORD_DIGITS], ids=["bytes", "words"])


@contextmanager
def digits_read_as(form: Any) -> Iterator[None]:
    """Every body read in `form`: the word form too where this CPU reads faster by bytes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(body_scan, "digit_form", lambda raw: form)
        words = body_scan.WORD_KERNEL.ready()
        assert words is not None
        patch.setattr(body_scan.WORD_KERNEL, "ready", lambda: WordForm(words.scan, 1.0, 0.0))
        yield


def reference(raw: bytes) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """(envelope, ids, each candidate's features: a list, a dict, None, or "absent") by
    orjson."""
    doc = orjson.loads(raw)
    candidates = doc.pop("candidates")
    ids = [c["id"] for c in candidates]
    feats = [c.get("features", "absent") for c in candidates]
    return doc, ids, feats


def assert_same(raw: bytes) -> ScannedCandidates:
    """The scan's reading of `raw` is orjson's (maps with distinct names only: the scan keeps
    every entry, orjson the last of a repeated name; scanned_matrix's tests cover those)."""
    got = scan_body(raw, 10_000)
    assert got is not None, raw[:200]
    envelope, scanned = got
    doc, ids, feats = reference(raw)
    assert envelope == doc
    assert scanned.ids == ids
    assert [type(i) for i in scanned.ids] == [type(i) for i in ids]
    tokens = scanned.id_tokens  # the ids as written, which the compiled item lookup reads
    assert tokens is not None and tokens.count == len(ids)
    assert orjson.loads(b"[" + tokens.buf[tokens.begin : tokens.end].tobytes()[:-1] + b"]") == ids
    want_counts = [ABSENT if isinstance(f, str) else NULL if f is None else len(f) for f in feats]
    assert scanned.counts.tolist() == want_counts
    assert scanned.maps.tolist() == [int(isinstance(f, dict)) for f in feats]
    flat = [
        v
        for f in feats
        if isinstance(f, list | dict)
        for v in (list(f.values()) if isinstance(f, dict) else f)
    ]
    with np.errstate(over="ignore"):
        want = np.array([np.nan if v is None else v for v in flat], dtype=np.float64)
        want32 = want.astype(np.float32)
    assert scanned.values.dtype == np.float32
    assert scanned.values.view(np.uint32).tolist() == want32.view(np.uint32).tolist()
    names = [k for f in feats if isinstance(f, dict) for k in f]
    starts, ends = scanned.keys[0::2], scanned.keys[1::2]
    got_names = [raw[a:b].decode() for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    assert got_names == names
    return scanned


# Numbers as clients write them: Python's repr (up to 17 digits), fixed and scientific
# notation, integers, exponents with signs and capitals, signed zeros.
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
float32s = st.floats(allow_nan=False, allow_infinity=False, width=32)
number_text = st.one_of(
    finite.map(repr),
    float32s.map(repr),
    float32s.map(lambda x: repr(float(np.float32(x)))),
    finite.map(lambda x: f"{x:.6e}"),
    finite.map(lambda x: f"{x:.3E}".replace("E+", "E")),
    st.floats(-1e6, 1e6).map(lambda x: f"{x:.4f}"),
    st.integers(-(10**25), 10**25).map(str),
    st.sampled_from(
        [
            *("0", "-0", "0.0", "-0.0", "0e0", "-0E-5", "1e39", "-1e300", "3.4028235e38"),
            *("3.4028236e38", "1.17549435e-38", "1e-40", "1e-320", "123456789012345678"),
            *("1234567890123456789", "0.000000000000000000001", "100000000000000000000"),
            *("1.50000000000000000000000", "9007199254740993", "1e22", "1e23", "5e-324"),
        ]
    ),
)
value_text = st.one_of(number_text, st.just("null"))
space = st.sampled_from(["", "", "", " ", "\n", "\t ", "\r\n  "])
ident = st.one_of(
    st.text(min_size=0, max_size=8),
    st.integers(-(2**63), 2**63 - 1),
)


# Numbers every scan reads (the exact path: at most 15 digits, exponents within 10^+-22).
exact_text = st.one_of(
    st.floats(-1e6, 1e6).map(lambda x: f"{x:.4f}"),
    st.floats(1e-15, 1e15).map(lambda x: f"{x:.6e}"),
    st.floats(-1e15, -1e-15).map(lambda x: f"{x:.5E}"),
    st.integers(-(10**15), 10**15).map(str),
    st.sampled_from(["0", "-0", "0.0", "-0.0", "0e0", "-0E-5", "1e22", "9007199254740991"]),
    st.just("null"),
)


MAP_NAMES = ["f0", "f1", "f2", "bm25", "a b", "x"]


@st.composite
def bodies(draw: st.DrawFn, values: st.SearchStrategy[str] = value_text) -> bytes:
    def ws() -> str:
        return draw(space)

    cands = []
    ids = draw(st.lists(ident, max_size=12, unique_by=lambda i: (type(i), i)))
    for cid in ids:
        members = [f'{ws()}"id"{ws()}:{ws()}{orjson.dumps(cid).decode()}{ws()}']
        kind = draw(st.sampled_from(["list", "list", "list", "map", "null", "absent"]))
        if kind == "list":
            texts = draw(st.lists(values, max_size=6))
            inner = ",".join(f"{ws()}{v}{ws()}" for v in texts) or ws()
            members.append(f'{ws()}"features"{ws()}:{ws()}[{inner}]{ws()}')
        elif kind == "map":
            names = draw(st.lists(st.sampled_from(MAP_NAMES), max_size=6, unique=True))
            inner = ",".join(f'{ws()}"{k}"{ws()}:{ws()}{draw(values)}{ws()}' for k in names)
            members.append(f'{ws()}"features"{ws()}:{ws()}{{{inner or ws()}}}{ws()}')
        elif kind == "null":
            members.append(f'{ws()}"features"{ws()}:{ws()}null{ws()}')
        if draw(st.booleans()):
            members.reverse()
        cands.append("{" + ",".join(members) + "}")
    array = f"[{ws()}{','.join(f'{ws()}{c}{ws()}' for c in cands)}{ws()}]"
    envelope = draw(
        st.dictionaries(
            st.sampled_from(["model", "top_k", "request_id", "user", "query"]),
            st.recursive(
                st.none()
                | st.booleans()
                | st.integers(-(2**63), 2**63 - 1)
                | st.floats()
                | st.text(max_size=5),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                ),
                max_leaves=6,
            ),
            max_size=4,
        )
    )
    members = [
        f"{ws()}{orjson.dumps(k).decode()}{ws()}:{ws()}{orjson.dumps(v).decode()}{ws()}"
        for k, v in envelope.items()
    ]
    members.insert(draw(st.integers(0, len(members))), f'{ws()}"candidates"{ws()}:{ws()}{array}')
    return f"{ws()}{{{','.join(members)}}}{ws()}".encode()


@FORMS
@settings(max_examples=200, deadline=None)
@given(bodies(exact_text))
def test_the_scan_equals_orjson_and_the_float32_cast(form: Any, raw: bytes) -> None:
    with digits_read_as(form):
        assert_same(raw)


@FORMS
@settings(max_examples=150, deadline=None)
@given(bodies())
def test_any_number_is_read_bit_for_bit_or_given_up(form: Any, raw: bytes) -> None:
    with digits_read_as(form):
        if scan_body(raw, 10_000) is not None:
            assert_same(raw)


@FORMS
@settings(max_examples=150, deadline=None)
@given(st.lists(value_text, min_size=1, max_size=40))
def test_numbers_are_read_bit_for_bit_or_given_up(form: Any, values: list[str]) -> None:
    raw = ('{"candidates":[{"id":"a","features":[' + ",".join(values) + "]}]}").encode()
    with digits_read_as(form):
        if scan_body(raw, 10_000) is not None:
            assert_same(raw)


@FORMS
def test_digit_runs_of_every_length_are_read_exactly(form: Any) -> None:
    """Runs of 1-26 digits before and after the point, after 0-10 leading zeros, with and
    without an exponent, ending 0-8 bytes before the body's end: read bit for bit or given up,
    and every one of at most 15 significant digits (the exact path) read."""
    rng = np.random.default_rng(3)
    texts = []
    for length in range(1, 27):
        digits = "".join(rng.choice(list("0123456789"), length))
        head = str(rng.integers(1, 10)) + digits[1:]
        for z in ("", "0", "0000000", "00000000", "0000000000"):
            texts += [head, f"0.{z}{head}", f"-{head}.{digits}", f"{head}e-{len(z) + 3}"]
            texts += [f"0.{z}{head}E+2", f"{head}.0{z}", f"-0.{z}{digits}", f"{head}{z}"]
    texts += ["12345678", "123456789012345678", "1234567890123456789", "0.99999999999999999"]
    with digits_read_as(form):
        for text in texts:
            significant = len(text.split("e")[0].split("E")[0].lstrip("-0.").replace(".", ""))
            for pad in range(9):
                raw = f'{{"candidates":[{{"id":1,"features":[{text}]}}]{" " * pad}}}'.encode()
                if scan_body(raw, 10_000) is not None:
                    assert_same(raw)
                else:
                    assert significant > 15, text


def test_long_values_take_the_word_form_once_it_is_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = orjson.dumps(
        {
            "candidates": [
                {"id": i, "features": np.random.default_rng(i).random(30).tolist()}
                for i in range(20)
            ]
        }
    )
    words = body_scan.WORD_KERNEL.ready()
    assert words is not None and digit_form(raw) is WORD_DIGITS
    forms: list[Any] = []

    def spied(*args: Any) -> int:
        forms.append(args[-1])
        return int(words.scan(*args))

    faster = WordForm(spied, byte_ns=30.0, word_ns=24.0)
    monkeypatch.setattr(body_scan.WORD_KERNEL, "ready", lambda: faster)
    assert_same(raw)
    assert forms == [WORD_DIGITS]
    monkeypatch.setattr(body_scan.WORD_KERNEL, "ready", lambda: None)  # not compiled yet
    assert_same(raw)  # read digit by digit meanwhile
    slower = WordForm(spied, byte_ns=31.0, word_ns=36.0)  # a CPU where bytes are faster
    monkeypatch.setattr(body_scan.WORD_KERNEL, "ready", lambda: slower)
    assert_same(raw)  # digit by digit too
    assert forms == [WORD_DIGITS]


def test_long_values_are_read_eight_digits_a_word() -> None:
    rng = np.random.default_rng(5)
    x = rng.random((50, 20))

    def body(rows: list[Any]) -> bytes:
        return orjson.dumps({"candidates": [{"id": i, "features": r} for i, r in enumerate(rows)]})

    def named(rows: list[Any]) -> bytes:
        return body([{f"f{j}": v for j, v in enumerate(r)} for r in rows])

    as_float32 = x.astype(np.float32).astype(np.float64).tolist()
    mostly_long = np.hstack([np.round(x[:, :6], 4), x[:, 6:]]).tolist()
    for raw in (body(as_float32), body(x.tolist()), named(x.tolist()), body(mostly_long)):
        assert digit_form(raw) is WORD_DIGITS
    short = [np.round(x, 4).tolist(), (x * 1000).astype(int).tolist(), [[None] * 20] * 50]
    for raw in (*map(body, short), named(np.round(x, 4).tolist()), b"", b"{}"):
        assert digit_form(raw) is BYTE_DIGITS


@FORMS
@settings(max_examples=150, deadline=None)
@given(float32s.filter(lambda x: math.isfinite(x) and x != 0))
def test_float32_rounding_midpoints_are_exact_or_given_up(form: Any, x: float) -> None:
    """The value halfway between two float32 numbers, written out exactly: the float64 product
    of the approximate path may fall on either side, so it must give up there."""
    below = np.float32(x)
    with np.errstate(over="ignore"):
        above = np.nextafter(below, np.float32(np.inf))
    mid = (float(below) + float(above)) / 2  # exact in float64
    assume(math.isfinite(mid))
    for text in (repr(mid), f"{mid:.17e}", f"{mid:.25e}"):
        raw = f'{{"candidates":[{{"id":1,"features":[{text}]}}]}}'.encode()
        with digits_read_as(form):
            if scan_body(raw, 10_000) is not None:
                assert_same(raw)


def test_usual_bodies_take_the_scan() -> None:
    rng = np.random.default_rng(7)
    rows = rng.random((50, 20)).astype(np.float32)
    for values in (rows.tolist(), np.round(rows, 4).tolist()):
        body = {
            "model": "m",
            "top_k": 5,
            "user": {"id": "u1", "profile": {"age": 31}},
            "candidates": [{"id": f"d{i}", "features": r} for i, r in enumerate(values)],
        }
        scanned = assert_same(orjson.dumps(body))
        assert scanned.counts.tolist() == [20] * 50


@pytest.mark.parametrize(
    "body",
    [
        b'{"candidates":[{"id":"a","features":[01]}]}',
        b'{"candidates":[{"id":"a","features":[012345678]}]}',
        b'{"candidates":[{"id":"a","features":[123456789.]}]}',
        b'{"candidates":[{"id":"a","features":[0.123456789e]}]}',
        b'{"candidates":[{"id":"a","features":[0.12345678x]}]}',
        b'{"candidates":[{"id":"a","features":[1234567812345678:]}]}',
        b'{"candidates":[{"id":"a","features":[1.]}]}',
        b'{"candidates":[{"id":"a","features":[.5]}]}',
        b'{"candidates":[{"id":"a","features":[1e]}]}',
        b'{"candidates":[{"id":"a","features":[+1]}]}',
        b'{"candidates":[{"id":"a","features":[--1]}]}',
        b'{"candidates":[{"id":"a","features":[NaN]}]}',
        b'{"candidates":[{"id":"a","features":[Infinity]}]}',
        b'{"candidates":[{"id":"a","features":[1,]}]}',
        b'{"candidates":[{"id":"a","features":[1 2]}]}',
        b'{"candidates":[{"id":"a","features":[nul]}]}',
        b'{"candidates":[{"id":"a","features":[true]}]}',
        b'{"candidates":[{"id":"a","features":["1"]}]}',
        b'{"candidates":[{"id":"a","features":[[1]]}]}',
        b'{"candidates":[{"id":"a","features":{"x\\u0041":1}}]}',
        b'{"candidates":[{"id":"a","features":{"\xc3\xa9":1}}]}',
        b'{"candidates":[{"id":"a","features":{"x":1,}}]}',
        b'{"candidates":[{"id":"a","features":{"x" 1}}]}',
        b'{"candidates":[{"id":"a","features":{"x":[1]}}]}',
        b'{"candidates":[{"id":"a","features":{1:1}}]}',
        b'{"candidates":[{"id":"a","features":[1],"extra":2}]}',
        b'{"candidates":[{"id":"a","id":"b","features":[1]}]}',
        b'{"candidates":[{"features":[1]}]}',
        b'{"candidates":[{"id":1.5,"features":[1]}]}',
        b'{"candidates":[{"id":01,"features":[1]}]}',
        b'{"candidates":[{"id":"a\x01","features":[1]}]}',
        b'{"candidates":[{"id":"\xff","features":[1]}]}',
        b'{"candidates":[{"id":"a","features":[1]},]}',
        b'{"candidates":[{"id":"a","features":[1]}],}',
        b'{"candidates":[{"id":"a","features":[1]}]} x',
        b'{"candidates":[{"id":"a","features":[1]}]',
        b'{"candidates":[1]}',
        b'{"candidates":{}}',
        b'{"candidates":[],"candidates":[]}',
        b'{"model":[1,2},"candidates":[]}',
        b'{"model":"m"}',
        b'[{"candidates":[]}]',
        b"",
        # Cut inside a number: the digit loops rely on the last byte being `}` or whitespace.
        b'{"candidates":[{"id":"a","features":[1',
        b'{"candidates":[{"id":"a","features":[0',
        b'{"candidates":[{"id":"a","features":[-',
        b'{"candidates":[{"id":"a","features":[1.',
        b'{"candidates":[{"id":"a","features":[1.25',
        b'{"candidates":[{"id":"a","features":[1e',
        b'{"candidates":[{"id":"a","features":[1e-',
        b'{"candidates":[{"id":"a","features":[1e5',
        b'{"candidates":[{"id":"a","features":{"x":12345678901234567',
    ],
)
@FORMS
def test_what_it_does_not_read_is_left_to_orjson(form: Any, body: bytes) -> None:
    with digits_read_as(form):
        assert scan_body(body, 10_000) is None


@FORMS
@settings(max_examples=150, deadline=None)
@given(bodies(), st.data())
def test_a_damaged_body_is_never_read_as_valid(form: Any, raw: bytes, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
    mutation = data.draw(st.sampled_from(["drop", "insert", "replace"]))
    byte = data.draw(st.sampled_from(list(b'{}[],:"\\-+.eE0123456789 ntfalsux')))
    if mutation == "drop":
        damaged = raw[:at] + raw[at + 1 :]
    elif mutation == "insert":
        damaged = raw[:at] + bytes([byte]) + raw[at:]
    else:
        damaged = raw[:at] + bytes([byte]) + raw[at + 1 :]
    with digits_read_as(form):
        if scan_body(damaged, 10_000) is None:
            return
        try:
            orjson.loads(damaged)
        except orjson.JSONDecodeError:
            pytest.fail(f"read a body orjson refuses: {damaged[:300]!r}")
        # A damaged name may repeat another of its map ("f1" -> "f0"): the scan keeps both
        # entries, orjson the last; scanned_matrix's tests cover how those are read.
        assume(not _repeats_a_name(damaged))
        assert_same(damaged)


def _repeats_a_name(raw: bytes) -> bool:
    import json

    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        repeated |= len({k for k, _ in items}) < len(items)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return repeated


@FORMS
@pytest.mark.parametrize("tail", [b"", b" ", b"\n", b" \t\r\n"])
def test_a_body_may_end_in_whitespace(form: Any, tail: bytes) -> None:
    raw = b'{"candidates":[{"id":"a","features":[1.25,12345678901234567,3e2]}]}' + tail
    with digits_read_as(form):
        got = scan_body(raw, 10_000)
    assert got is not None
    assert got[1].values.tolist() == [1.25, np.float32(12345678901234567), 300.0]


def test_more_candidates_than_allowed_are_left_to_the_full_path() -> None:
    raw = orjson.dumps({"candidates": [{"id": i, "features": [i]} for i in range(6)]})
    assert scan_body(raw, 4) is None  # the scan stops at max + 1
    got = scan_body(raw, 5)
    assert got is not None  # max + 1: scanned_matrix's own too_long
    with pytest.raises(RequestError, match="at most 5"):
        scanned_matrix(got[1], ["f0"], max_candidates=5)


def test_nothing_is_scanned_before_the_kernel_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_scan.KERNEL, "_kernel", None)
    assert scan_body(b'{"candidates":[]}', 10) is None


def _matrix(raw: bytes, width: int, **kw: Any) -> Any:
    got = scan_body(raw, 10_000)
    assert got is not None
    return scanned_matrix(got[1], [f"f{j}" for j in range(width)], **kw)


def test_scanned_matrix_equals_build_matrix() -> None:
    body = {
        "candidates": [
            {"id": "a", "features": [1, None, 2.5]},
            {"id": 2, "features": [0, -1, 1e39]},
        ]
    }
    raw = orjson.dumps(body)
    got = _matrix(raw, 3, extra_columns=2)
    want = build_matrix(body["candidates"], ["f0", "f1", "f2"], extra_columns=2)
    assert got.ids == want.ids
    assert got.features.tobytes() == want.features.tobytes()


@settings(max_examples=150, deadline=None)
@given(
    bodies(exact_text),
    st.lists(st.sampled_from(MAP_NAMES), min_size=1, max_size=4, unique=True),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2),
)
def test_scanned_matrix_equals_build_matrix_for_lists_and_maps(
    raw: bytes, names: list[str], optional: bool, ignore: bool, extra: int
) -> None:
    """Whatever the body holds: the same matrix, the same error, or (None) the full path."""
    got = scan_body(raw, 10_000)
    assert got is not None
    kw: dict[str, Any] = {
        "extra_columns": extra,
        "features_optional": optional,
        "ignore_unknown": ignore,
        "min_candidates": 0,
    }
    candidates = orjson.loads(raw)["candidates"]
    try:
        want = build_matrix(candidates, names, **kw)
    except RequestError as exc:
        want_error: RequestError | None = exc
    else:
        want_error = None
    try:
        matrix = scanned_matrix(got[1], names, **kw)
    except RequestError as exc:
        assert want_error is not None and exc.detail() == want_error.detail()
        return
    if matrix is None:
        assert want_error is not None  # left to build_matrix, which names it
        return
    assert want_error is None
    assert matrix.ids == want.ids
    assert matrix.features.tobytes() == want.features.tobytes()


def test_a_name_given_twice_keeps_its_last_value() -> None:
    raw = b'{"candidates":[{"id":"a","features":{"f1":1,"f0":2,"f1":3}}]}'
    got = _matrix(raw, 2)
    want = build_matrix(orjson.loads(raw)["candidates"], ["f0", "f1"])
    np.testing.assert_array_equal(got.features, want.features)
    np.testing.assert_array_equal(got.features, [[2, 3]])


def test_maps_in_the_models_order_or_not_fill_the_same_columns() -> None:
    """Names are first tried as the column after the previous name's; out of order, left
    out, or a model listing a name twice (its last index counts), the columns are the same."""
    names = ["f0", "f1", "f2", "f3"]
    maps = [
        {"f0": 1, "f1": 2, "f2": 3, "f3": 4},
        {"f3": 4, "f2": 3, "f1": 2, "f0": 1},
        {"f0": 1, "f2": 3, "f3": 4},
        {"f1": 2, "f3": 4},
        {"f3": 4, "f0": 1, "f1": 2},
    ]
    body = {"candidates": [{"id": i, "features": m} for i, m in enumerate(maps)]}
    raw = orjson.dumps(body)
    for model in (names, ["f0", "f1", "f0", "f2"]):
        got = scan_body(raw, 10_000)
        assert got is not None
        matrix = scanned_matrix(got[1], model, ignore_unknown=True)
        want = build_matrix(body["candidates"], model, ignore_unknown=True)
        assert matrix is not None
        assert matrix.features.tobytes() == want.features.tobytes()


def test_unknown_names_are_left_to_the_full_path_unless_ignored() -> None:
    raw = b'{"candidates":[{"id":"a","features":{"f1":1,"nope":2}}]}'
    assert _matrix(raw, 2) is None
    np.testing.assert_array_equal(_matrix(raw, 2, ignore_unknown=True).features, [[np.nan, 1]])


def test_the_name_table_finds_every_name_and_no_other() -> None:
    names = (*(f"feature_{i}" for i in range(300)), "é", "")
    blob, offsets, slots, unique = name_table(names)
    assert unique and not name_table(("a", "b", "a"))[3]
    assert len(slots) >= 2 * len(names) and len(slots) & (len(slots) - 1) == 0
    for index, name in enumerate(names):
        encoded = name.encode()
        j = fnv1a(encoded) & (len(slots) - 1)
        while blob[offsets[slots[j]] : offsets[slots[j] + 1]].tobytes() != encoded:
            j = (j + 1) & (len(slots) - 1)
        assert slots[j] == index
    assert fnv1a(b"") == 14695981039346656037
    assert fnv1a(b"a") == 0xAF63DC4C8601EC8C  # the published FNV-1a 64 test vector


def test_scanned_matrix_with_optional_features() -> None:
    raw = b'{"candidates":[{"id":"a"},{"id":"b","features":null},{"id":"c","features":[4,5]}]}'
    got = _matrix(raw, 2, features_optional=True)
    np.testing.assert_array_equal(got.features, [[np.nan, np.nan], [np.nan, np.nan], [4, 5]])
    assert _matrix(raw, 2) is None  # not optional: the full path names candidates[0]


def test_scanned_matrix_leaves_a_wrong_width_to_the_full_path() -> None:
    raw = b'{"candidates":[{"id":"a","features":[1,2]},{"id":"b","features":[1]}]}'
    assert _matrix(raw, 2) is None


@pytest.mark.parametrize(
    ("raw", "kw", "kind"),
    [
        (b'{"candidates":[]}', {}, "too_short"),
        (b'{"candidates":[{"id":"a","features":[1]}]}', {"min_candidates": 2}, "too_short"),
        (
            b'{"candidates":[{"id":"a","features":[1]},{"id":"b","features":[1]}]}',
            {"max_candidates": 1},
            "too_long",
        ),
        (
            b'{"candidates":[{"id":"a","features":[1]},{"id":"a","features":[2]}]}',
            {},
            "duplicate_id",
        ),
    ],
)
def test_scanned_matrix_errors_are_build_matrix_errors(
    raw: bytes, kw: dict[str, Any], kind: str
) -> None:
    with pytest.raises(RequestError) as got:
        _matrix(raw, 1, **kw)
    with pytest.raises(RequestError) as want:
        build_matrix(orjson.loads(raw)["candidates"], ["f0"], **kw)
    assert got.value.type == kind
    assert got.value.detail() == want.value.detail()


def test_floats_survive_struct_round_trip() -> None:
    """A float32 written with 9 significant digits (enough to round-trip) reads back exactly."""
    values = np.random.default_rng(3).standard_normal(500).astype(np.float32)
    text = ",".join(f"{v:.9g}" for v in values.tolist())
    raw = f'{{"candidates":[{{"id":"a","features":[{text}]}}]}}'.encode()
    got = scan_body(raw, 10)
    assert got is not None
    assert got[1].values.tobytes() == struct.pack(f"{len(values)}f", *values.tolist())
