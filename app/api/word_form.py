"""The body scan's word form, and whether this CPU reads long numbers faster with it.

The word form (app.api.body_kernel.SIGNATURES) reads eight digits per step where the byte form
reads one. On an AMD Zen 4 VM it read a 17-digit value in 24 ns against 36; on an Intel Xeon VM
(AVX-512) in 35.5 ns against 31 for the byte form once its digit loops lost their bounds
checks, and a body of 36 short and 100 long values per candidate in 32.4 against 26.6 ns a
value. Which form wins depends on the CPU, so once the word form is compiled both are timed on
a body of long values (~40 KB, a few runs each, alternating: about a millisecond), and the
word form serves only where it is at least WORD_GAIN faster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson

log = logging.getLogger(__name__)

WORD_GAIN = 0.95  # the word form's time at most this share of the byte form's to be used
ROUNDS = 7  # runs of each form; the fastest of each is compared
_CANDIDATES, _VALUES = 64, 32


@dataclass(frozen=True)
class WordForm:
    """The word form's scan, and the two forms' times per long value on this CPU."""

    scan: Callable[..., int]
    byte_ns: float
    word_ns: float

    @property
    def faster(self) -> bool:
        return self.word_ns <= WORD_GAIN * self.byte_ns


def long_values_body() -> bytes:
    """_CANDIDATES candidates of _VALUES float32 values written as doubles (17 digits, as
    most clients write their features)."""
    rng = np.random.default_rng(0)
    rows = rng.random((_CANDIDATES, _VALUES), dtype=np.float32).astype(np.float64).tolist()
    return orjson.dumps({"candidates": [{"id": i, "features": r} for i, r in enumerate(rows)]})


def timed(
    byte_scan: Callable[..., int],
    word_scan: Callable[..., int],
    word_digits: np.integer,
    clock: Callable[[], float] = time.perf_counter,
) -> WordForm:
    """Both forms timed on long_values_body, alternating (whatever else the machine does
    meanwhile slows both alike); ValueError if they do not both read it."""
    raw = long_values_body()
    data = np.frombuffer(raw, dtype=np.uint8)
    rows = _CANDIDATES + 1
    buffers = (
        np.empty(len(raw) // 2 + 1, dtype=np.float32),
        np.empty(rows, dtype=np.int64),
        np.empty(rows, dtype=np.uint8),
        np.empty(2, dtype=np.int64),
        np.empty(len(raw) + 1, dtype=np.uint8),
        np.zeros(6, dtype=np.int64),
    )
    best = {"byte": float("inf"), "word": float("inf")}
    for _ in range(ROUNDS):
        for form, scan, last in (("byte", byte_scan, None), ("word", word_scan, word_digits)):
            started = clock()
            status = scan(data, *buffers, last)
            best[form] = min(best[form], clock() - started)
            if status != 0:
                raise ValueError(f"the {form} form did not read the calibration body ({status})")
    per_value = 1e9 / (_CANDIDATES * _VALUES)
    return WordForm(word_scan, best["byte"] * per_value, best["word"] * per_value)


def chosen(form: WordForm) -> WordForm:
    """`form`, its verdict logged for the operator."""
    verdict = "used for long numbers" if form.faster else "not used: the byte form is as fast"
    log.info(
        "body scan on this CPU: a long value %.1f ns by words, %.1f by bytes; the word form %s",
        form.word_ns,
        form.byte_ns,
        verdict,
    )
    return form
