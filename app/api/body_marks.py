"""Where a raw /rerank body's quotes and brackets are, found once per request.

Admission counts a body's candidates before it is parsed, and a shed request's answer needs
its ids without parsing it (app.api.retrieval_order): both start from the same positions, so
one pass finds them and both read them: compiled (app.api.marks_kernel, 32 bytes at a time,
holding the GIL; numba's app.api.ids_kernel.find_marks where that cannot be compiled), or
vectorised until that is compiled. A body of 1,000 candidates x 136
features (954 KB) holds about 10,000 such bytes; the compiled pass took 0.35 ms against 0.46 ms
for numpy's five passes alone, and 0.35 against 4.4 ms beside a busy thread (each numpy pass
gives the GIL up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.background_kernel import BackgroundKernel

_QUOTE = ord('"')
# [ ] { } are the bytes equal to 0x59 under the mask 0xD9 (with Y _ y and DEL, which readers
# drop): two operations instead of four.
BRACKET_MASK, BRACKET_BITS = 0xD9, 0x59
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BodyMarks:
    raw: bytes
    data: np.ndarray  # uint8 [n_bytes], a view of raw
    marks: np.ndarray  # int64 [n_marks]: offsets of the quotes and of [ ] { } Y _ y DEL

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
                return cls(raw, data, out[:found].copy())
        marks = np.flatnonzero(((data & BRACKET_MASK) == BRACKET_BITS) | (data == _QUOTE))
        return cls(raw, data, marks)

    def quotes(self) -> np.ndarray:
        """int64 [n_quotes]: the offsets of the quotes."""
        return self.marks[self.data[self.marks] == _QUOTE]


@dataclass(frozen=True)
class ShedKernels:
    find_marks: Callable[..., int]  # app.api.marks_kernel's, or app.api.ids_kernel.find_marks
    count_rows: Callable[..., int]  # app.api.ids_kernel.count_rows
    scan_ids: Callable[..., int]  # app.api.ids_kernel.scan_ids
    write_results: Callable[..., int]  # app.api.ids_kernel.write_results


def _load() -> ShedKernels:
    from app.api import ids_kernel, marks_kernel

    find_marks: Callable[..., int]
    try:
        find_marks = marks_kernel.compile_find_marks()
    except Exception:  # llvmlite cannot build it on this host: numba's pass serves
        log.warning("vector body-marks pass unavailable; using numba's", exc_info=True)
        find_marks = ids_kernel.find_marks
    return ShedKernels(
        find_marks, ids_kernel.count_rows, ids_kernel.scan_ids, ids_kernel.write_results
    )


# Compiled in the background with the body scan (LTR_BODY_SCAN); numpy serves until then.
KERNEL = BackgroundKernel("shed-ids", _load)


def estimated_rows(body: BodyMarks) -> int:
    """Candidates in a raw /rerank body, counted without parsing (each has one `id` key, and
    one `features` key unless the store supplies them); at least 1. It runs on the event loop
    for every request, before admission: one compiled pass over the marks, or (until that is
    compiled) vectorised, both keys matched at the quotes only (about 7x less than two
    bytes.count)."""
    kernels = KERNEL.ready()
    if kernels is not None:
        return int(kernels.count_rows(body.data, body.marks))
    data, quotes = body.data, body.quotes()
    return max(_keys_at(data, quotes, b'id"'), _keys_at(data, quotes, b'features"'), 1)


def _keys_at(data: np.ndarray, quotes: np.ndarray, rest: bytes) -> int:
    """How many quotes in uint8 `data` [n_bytes] are followed by `rest`."""
    starts = quotes[quotes + len(rest) < len(data)]
    for j, byte in enumerate(rest, 1):
        starts = starts[data[starts + j] == byte]
    return len(starts)
