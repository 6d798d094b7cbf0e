"""A /rerank body split into its envelope and its candidates without decoding the features as
Python objects: the compiled scan (app.api.body_kernel) reads the feature values of the usual
body (lists, or maps of plain names) straight into float32 and its ids into one small JSON
array, and orjson decodes only those ids and the envelope (the body with `candidates`
replaced by `null`). `scanned_matrix` then lays the values out in the model's columns (maps by
name, compiled: app.api.map_kernel). At 1,000 candidates x 136 features the scan takes a
third to a half of what orjson plus the float32 copy took.

`scan_body` gives None for anything the scan does not read (an escaped name, an unusual number,
bad JSON) and before the kernels are compiled, and `scanned_matrix` None for features the model
does not take; the caller then decodes the whole body, as before, which also reports what is
wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import orjson

from app.api.request_matrix import (
    ID_TYPES,
    CandidateMatrix,
    Loc,
    check_count,
    duplicate_id,
    with_extra_columns,
)
from app.api.word_form import WordForm, chosen, timed
from app.background_kernel import BackgroundKernel
from app.features.item_lookup import IdTokens

OK = 0
NULL, ABSENT = -1, -2  # a candidate's count when its `features` is null, or not there
_MIN_CANDIDATE_BYTES = 8  # {"id":1}
_MIN_MAP_ENTRY_BYTES = 6  # "a":1,
_FNV_OFFSET, _FNV_PRIME, _U64 = 14695981039346656037, 1099511628211, 2**64 - 1
# The scan's digit loops (app.api.body_kernel.SIGNATURES): digit by digit, or eight digits a
# word, for a body whose values are mostly long. Judged from a sample of the body's middle:
# digits per comma, 5 for `0.1234,`, 18 for `0.12340000271797180,` (a float32 written as a
# double, as most clients write theirs), 8 for `"f12":0.1234,`. On a Zen 4 VM words save ~11
# ns on a long value and cost a short one ~3 ns, so they pay from about a quarter of the values
# long; on other CPUs they may not pay at all (app.api.word_form times both once).
BYTE_DIGITS, WORD_DIGITS = None, np.int64(1)  # the scan's last argument (its form's type)
_SAMPLE_BYTES = 2048
_WORD_DIGITS_PER_COMMA = 10
_DIGIT_BYTES = b"0123456789"


@dataclass(frozen=True)
class ScannedCandidates:
    """The candidates of a scanned body, in order."""

    ids: list[Any]  # str | int
    values: np.ndarray  # float32 [sum of the lengths]: every list or map, one after another
    counts: np.ndarray  # int64 [n_candidates]: each list's or map's length, or NULL or ABSENT
    maps: np.ndarray  # uint8 [n_candidates]: 1 where `features` is a name -> value map
    keys: np.ndarray  # int64 [2 x map entries]: each map name's start and end in `raw`
    raw: bytes
    id_tokens: IdTokens | None = None  # the ids as the body wrote them (`tok,tok,`)


@dataclass(frozen=True)
class Kernels:
    scan: Callable[..., int]  # app.api.body_kernel
    fill: Callable[..., int]  # app.api.map_kernel
    write_results: Callable[..., int]  # app.api.answer_kernel: the answer's side


def _load() -> Kernels:
    from app.api import answer_kernel, body_kernel, map_kernel

    assert (body_kernel.OK, body_kernel.NULL, body_kernel.ABSENT) == (OK, NULL, ABSENT)
    forms = [str(signature.args[-1]) for signature in body_kernel.SIGNATURES]
    assert forms == ["none", str(WORD_DIGITS.dtype)], forms
    assert map_kernel.OK == OK
    # write_results is typed lazily: compiled here for the types answers pass (read-only
    # bytes from orjson, int64 order, a writable buffer), not in the first answer's request.
    ids, scores = np.frombuffer(b'["a",2]', dtype=np.uint8), np.frombuffer(b"[1.5,0.5]", np.uint8)
    dest = np.empty(256, dtype=np.uint8)
    answer_kernel.write_results(ids, 2, np.array([1, 0], dtype=np.int64), scores, dest)
    return Kernels(body_kernel.scan, map_kernel.fill, answer_kernel.write_results)


def _load_words() -> WordForm:
    from app.api import body_kernel

    word = body_kernel.compile_word_form()
    return chosen(timed(body_kernel.scan, word, WORD_DIGITS))


KERNEL = BackgroundKernel("body-scan", _load)
# The word form, used for bodies of long numbers where it reads them faster on this CPU
# (app.api.word_form): compiled after the rest (app.kernel_warmup's late kernels); until it is
# ready such bodies are scanned digit by digit, to the same values.
WORD_KERNEL = BackgroundKernel("body-scan words", _load_words, late=True)


def scan_body(raw: bytes, max_candidates: int) -> tuple[dict[str, Any], ScannedCandidates] | None:
    """(the body's object without `candidates`, its candidates), or None: decode it whole."""
    kernels = KERNEL.ready()
    if kernels is None:
        return None
    data = np.frombuffer(raw, dtype=np.uint8)
    # Upper bounds, allocated but touched only as far as written: a value takes at least two
    # bytes (a digit and a separator), a map entry six, a candidate eight.
    values = np.empty(len(raw) // 2 + 1, dtype=np.float32)
    rows = min(len(raw) // _MIN_CANDIDATE_BYTES, max_candidates) + 1
    counts = np.empty(rows, dtype=np.int64)
    maps = np.empty(rows, dtype=np.uint8)
    keys = np.empty(2 * (len(raw) // _MIN_MAP_ENTRY_BYTES + 1), dtype=np.int64)
    ids = np.empty(len(raw) + 1, dtype=np.uint8)
    out = np.zeros(6, dtype=np.int64)
    scan, form = kernels.scan, digit_form(raw)
    if form is WORD_DIGITS:
        words = WORD_KERNEL.ready()
        if words is None or not words.faster:
            form = BYTE_DIGITS
        else:
            scan = words.scan
    if scan(data, values, counts, maps, keys, ids, out, form) != OK:
        return None
    n, start, end, n_values, n_id_bytes, n_keys = out.tolist()
    try:
        id_list = orjson.loads(b"[" + ids[: max(n_id_bytes - 1, 0)].tobytes() + b"]")
        envelope = orjson.loads(raw[:start] + b"null" + raw[end:])
    except orjson.JSONDecodeError:  # e.g. an id that is not UTF-8: the full decode says so
        return None
    if type(envelope) is not dict or len(id_list) != n or not set(map(type, id_list)) <= ID_TYPES:
        return None
    del envelope["candidates"]
    scanned = ScannedCandidates(
        id_list,
        values[:n_values],
        counts[:n].copy(),
        maps[:n].copy(),
        keys[: 2 * n_keys],
        raw,
        IdTokens(ids, 0, n_id_bytes, n),
    )
    return envelope, scanned


def digit_form(raw: bytes) -> np.integer[Any] | None:
    """WORD_DIGITS when the body's values are mostly long numbers (see _WORD_DIGITS_PER_COMMA),
    judged from up to _SAMPLE_BYTES of its middle (~1 us); BYTE_DIGITS otherwise."""
    middle = len(raw) // 2
    sample = raw[max(0, middle - _SAMPLE_BYTES // 2) : middle + _SAMPLE_BYTES // 2]
    digits = len(sample) - len(sample.translate(None, _DIGIT_BYTES))
    if digits >= _WORD_DIGITS_PER_COMMA * max(sample.count(b","), 1):
        return WORD_DIGITS
    return BYTE_DIGITS


def scanned_matrix(
    scanned: ScannedCandidates,
    names: list[str],
    *,
    min_candidates: int = 1,
    max_candidates: int = 10_000,
    extra_columns: int = 0,
    features_optional: bool = False,
    ignore_unknown: bool = False,
) -> CandidateMatrix | None:
    """build_matrix's result for scanned candidates with the model's candidate feature
    `names`, and the same RequestError for their count or a duplicate id; None when their
    features are not what the model takes (a list of another length, an unknown name...):
    the caller then decodes the body and build_matrix names the problem."""
    where: Loc = ("body", "candidates")
    ids, counts = scanned.ids, scanned.counts
    n, width = len(ids), len(names)
    check_count(n, min_candidates, max_candidates, where)
    if not scanned.maps.any() and np.all(counts == width):  # the usual body: one reshape
        matrix = with_extra_columns(ids, scanned.values.reshape(n, width), extra_columns)
    else:
        kernels = KERNEL.ready()
        assert kernels is not None  # it scanned them
        blob, offsets, slots, unique = name_table(tuple(names))
        features = np.full((n, width + extra_columns), np.nan, dtype=np.float32)
        data = np.frombuffer(scanned.raw, dtype=np.uint8)
        args = (data, scanned.values, scanned.keys, counts, scanned.maps, blob, offsets, slots)
        if kernels.fill(*args, features, ignore_unknown, features_optional, unique) != OK:
            return None
        matrix = CandidateMatrix(ids, features)
    if len(set(ids)) != n:
        duplicate_id(ids, where)
    return matrix


@lru_cache(maxsize=64)
def name_table(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(the names' UTF-8 bytes one after another, int64 [n + 1] offsets into them, int64
    slots of an open-addressing table by FNV-1a: a name's index or -1, whether no name is
    listed twice) for map_kernel. A name listed twice takes its last index, as
    `{name: i for i, name in ...}` does."""
    encoded = [name.encode() for name in names]
    offsets = np.zeros(len(names) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(e) for e in encoded], dtype=np.int64)
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    size = 8
    while size < 2 * len(names):
        size *= 2
    slots = np.full(size, -1, dtype=np.int64)
    for index, name in enumerate(encoded):
        j = fnv1a(name) & (size - 1)
        while slots[j] >= 0 and encoded[slots[j]] != name:
            j = (j + 1) & (size - 1)
        slots[j] = index
    for array in (offsets, slots):
        array.setflags(write=False)
    return blob, offsets, slots, len(set(encoded)) == len(encoded)


def fnv1a(data: bytes) -> int:
    """64-bit FNV-1a, as map_kernel computes it."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _U64
    return h
