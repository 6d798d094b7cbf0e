"""Where a raw /rerank body's quotes and brackets are, found once per request.

Admission counts a body's candidates before it is parsed, and a shed request's answer needs
its ids without parsing it (app.api.retrieval_order): both start from the same positions, so
one pass finds them and both read them: compiled (app.api.marks_kernel, 32 bytes at a time,
the GIL given up once for the pass; numba's app.api.ids_kernel.find_marks where that cannot be
compiled), or vectorised until that is compiled. A body of 1,000 candidates x 136 features
(954 KB) holds about 10,000 such bytes; the compiled pass took 0.35 ms against 0.46 ms
for numpy's five passes alone, and 0.35 against 4.4 ms beside a busy thread (each numpy pass
gives the GIL up).

Admission takes the body's outline (`BodyMarks.outline`): the same walks read the same rows
and ids from it, but a body of named features has ~280,000 marks in 1,000 x 136 and its
outline ~10,000 (app.api.outline_kernel): finding, counting and listing took 0.30 ms against
0.77 ms in one process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.background_kernel import BackgroundKernel

_QUOTE = ord('"')
_OPEN_OBJECT, _OPEN_LIST, _CLOSE_OBJECT, _CLOSE_LIST = b"{[}]"
ROW_DEPTH = 3  # {"candidates": [{"id": ...}]}: the body's object, the array, a candidate
# [ ] { } are the bytes equal to 0x59 under the mask 0xD9 (with Y _ y and DEL, which readers
# drop): two operations instead of four.
BRACKET_MASK, BRACKET_BITS = 0xD9, 0x59
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BodyMarks:
    raw: bytes
    data: np.ndarray  # uint8 [n_bytes], a view of raw
    marks: np.ndarray  # int64 [n_marks]: offsets of the quotes and of [ ] { } Y _ y DEL
    # False for an outline: the quotes more than three deep left out (app.api.outline_kernel)
    complete: bool = True

    @classmethod
    def outline(cls, raw: bytes) -> BodyMarks:
        """The marks that admission's row count and the shed path's id walk read: for a body
        without backslashes (escaped quotes do not pair up), once the kernels are compiled,
        its outline (the brackets outside strings and the quotes at most three deep); else
        every mark."""
        kernels = KERNEL.ready()
        if kernels is None or kernels.find_structure is None:
            return cls.of(raw)
        data = np.frombuffer(raw, dtype=np.uint8)
        # A body of usual candidates has 4-6 brackets per candidate of 100+ bytes.
        brackets = np.empty(len(raw) // 16 + 16, dtype=np.int64)
        found = kernels.find_structure(data, brackets)
        if found < 0:  # denser, ending inside a string, or with a backslash
            return cls.of(raw)
        out = np.empty(len(raw) // 8 + 16, dtype=np.int64)
        max_read = len(raw) // 4 + 4096
        kept = kernels.outline_marks(data, brackets[:found], out, max_read)
        if kept < 0:
            return cls.of(raw)
        return cls(raw, data, out[:kept].copy(), complete=False)

    @classmethod
    def of(cls, raw: bytes) -> BodyMarks:
        data = np.frombuffer(raw, dtype=np.uint8)
        kernels = KERNEL.ready()
        if kernels is not None:
            # Room for a mark every fourth byte (a body of 1,000 x 136 numbers has one in
            # 95); untouched pages of the buffer cost nothing. Denser bodies go to numpy.
            out = np.empty(len(raw) // 4 + 16, dtype=np.int64)
            found = kernels.find_marks(data, out)
            if found >= 0:
                # A sparse body's few marks are copied so the buffer goes at once; a dense
                # one's (named features: a mark every 6 bytes) fill most of the pages it
                # touched, and copying them cost 0.02 ms of the loop per 630 KB body, 0.06-0.1
                # per 1.7 MB (one process).
                dense = 4 * found >= len(out)
                return cls(raw, data, out[:found] if dense else out[:found].copy())
        marks = np.flatnonzero(((data & BRACKET_MASK) == BRACKET_BITS) | (data == _QUOTE))
        return cls(raw, data, marks)

    def quotes(self) -> np.ndarray:
        """int64 [n_quotes]: the offsets of the quotes."""
        return self.marks[self.data[self.marks] == _QUOTE]


@dataclass(frozen=True)
class ShedKernels:
    find_marks: Callable[..., int]  # app.api.marks_kernel's, or app.api.ids_kernel.find_marks
    find_structure: Callable[..., int] | None  # app.api.marks_kernel's, where it compiles
    outline_marks: Callable[..., int]  # app.api.outline_kernel.outline_marks
    count_rows: Callable[..., int]  # app.api.ids_kernel.count_rows
    rows_three_deep: Callable[..., int]  # app.api.ids_kernel.rows_three_deep
    scan_ids: Callable[..., int]  # app.api.ids_kernel.scan_ids
    write_results: Callable[..., int]  # app.api.ids_kernel.write_results


def _load() -> ShedKernels:
    from app.api import ids_kernel, marks_kernel, outline_kernel

    find_marks: Callable[..., int]
    find_structure: Callable[..., int] | None
    try:
        find_marks = marks_kernel.compile_find_marks()
        find_structure = marks_kernel.compile_find_structure()
    except Exception:  # llvmlite cannot build it on this host: numba's pass serves
        log.warning("vector body-marks pass unavailable; using numba's", exc_info=True)
        find_marks, find_structure = ids_kernel.find_marks, None
    kernels = ShedKernels(
        find_marks,
        find_structure,
        outline_kernel.outline_marks,
        ids_kernel.count_rows,
        ids_kernel.rows_three_deep,
        ids_kernel.scan_ids,
        ids_kernel.write_results,
    )
    _compile_for_requests(kernels)
    return kernels


def _compile_for_requests(kernels: ShedKernels) -> None:
    """Calls each lazily typed kernel once with the argument types requests pass (a read-only
    body, int64 marks, writable buffers): numba compiles per type on the first call, seconds
    with an empty cache, and that must happen here, not on the event loop of a request that
    is being shed because it is late."""
    from app.api.ids_kernel import N_IDS, OUT_LEN

    raw = b'{"candidates": [{"id": "a", "features": [1.5]}, {"id": 2}], "top_k": 1}'
    data = np.frombuffer(raw, dtype=np.uint8)
    out = np.empty(len(raw) // 4 + 16, dtype=np.int64)
    found = kernels.find_marks(data, out)
    marks = out[:found].copy() if found >= 0 else np.flatnonzero(data == _QUOTE)
    kernels.count_rows(data, marks)
    kernels.rows_three_deep(data, marks)
    brackets = np.flatnonzero((data & BRACKET_MASK) == BRACKET_BITS)
    kernels.outline_marks(data, brackets, np.empty(len(raw), dtype=np.int64), len(raw))
    ids = np.empty(len(raw) + 2, dtype=np.uint8)
    starts = np.empty(len(raw), dtype=np.int64)
    result = np.zeros(4, dtype=np.int64)
    kernels.scan_ids(data, marks, ids, starts, result)
    dest = np.empty(4 * len(raw), dtype=np.uint8)
    kernels.write_results(ids, starts, int(result[N_IDS]), int(result[OUT_LEN]), 1, dest)


# Compiled in the background with the body scan (LTR_BODY_SCAN); numpy serves until then.
KERNEL = BackgroundKernel("shed-ids", _load)


def estimated_rows(body: BodyMarks) -> int:
    """Candidates in a raw /rerank body, counted without parsing: the `id` keys (or the
    `features` keys, if more: each candidate has one `id`, and one `features` unless the store
    supplies them) three containers deep, as a candidate's in {"candidates": [{"id": ...}]}
    (the user's `id`, two deep, is not a row); anywhere when there are none there or the
    quotes and brackets do not balance; at least 1. An estimate for admission, which runs on
    the event loop for every request: one compiled pass over the marks, or (until that is
    compiled) vectorised, the keys matched at the quotes only (about 7x less than two
    bytes.count)."""
    kernels = KERNEL.ready()
    if kernels is not None:
        if body.complete:
            return int(kernels.count_rows(body.data, body.marks))
        rows = int(kernels.rows_three_deep(body.data, body.marks))
        if rows > 0:
            return rows
        # None three deep, or unbalanced: keys anywhere, which only every mark shows.
        return int(kernels.count_rows(body.data, BodyMarks.of(body.raw).marks))
    data, marks = body.data, body.marks
    kinds = data[marks]
    is_quote = kinds == _QUOTE
    quotes_so_far = np.cumsum(is_quote)
    opening = is_quote & (quotes_so_far % 2 == 1)
    outside = ~is_quote & (quotes_so_far % 2 == 0)
    step = np.zeros(marks.shape[0], dtype=np.int64)
    step[outside & ((kinds == _OPEN_OBJECT) | (kinds == _OPEN_LIST))] = 1
    step[outside & ((kinds == _CLOSE_OBJECT) | (kinds == _CLOSE_LIST))] = -1
    depth = np.cumsum(step)
    quotes = marks[is_quote]
    at_row = (opening & (depth == ROW_DEPTH))[is_quote]
    ids, ids_in_rows = _keys_at(data, quotes, at_row, b'id"')
    features, features_in_rows = _keys_at(data, quotes, at_row, b'features"')
    balanced = marks.shape[0] == 0 or (depth[-1] == 0 and quotes_so_far[-1] % 2 == 0)
    rows = max(ids_in_rows, features_in_rows)
    return rows if rows > 0 and balanced else max(ids, features, 1)


def _keys_at(
    data: np.ndarray, quotes: np.ndarray, at_row: np.ndarray, rest: bytes
) -> tuple[int, int]:
    """How many of the quotes `quotes` (int64 [n]) in uint8 `data` [n_bytes] are followed by
    `rest`: in all, and those where bool `at_row` [n]."""
    keep = quotes + len(rest) < len(data)
    starts, rows = quotes[keep], at_row[keep]
    for j, byte in enumerate(rest, 1):
        match = data[starts + j] == byte
        starts, rows = starts[match], rows[match]
    return len(starts), int(np.count_nonzero(rows))
