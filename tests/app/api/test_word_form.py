"""The word form serves only where this CPU reads long numbers faster with it: the two forms
are timed on a body of long values, and the verdict follows the times."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from app.api import body_scan, word_form
from app.api.word_form import WordForm, long_values_body, timed


class _Clock:
    """A clock that each stub scan moves on by its own cost."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _stub(clock: _Clock, costs: Iterator[float], status: int = 0) -> Any:
    def scan(*args: Any) -> int:
        clock.now += next(costs)
        return status

    return scan


@pytest.mark.parametrize(
    ("byte_cost", "word_cost", "faster"),
    [(31.0, 36.0, False), (36.0, 24.0, True), (30.0, 29.0, False), (30.0, 28.0, True)],
)
def test_the_verdict_follows_the_fastest_runs(
    byte_cost: float, word_cost: float, faster: bool
) -> None:
    clock = _Clock()
    # Each form's first run is slow (cold caches): the fastest run of each is compared.
    bytes_ = _stub(clock, iter([byte_cost * 3] + [byte_cost] * 20))
    words = _stub(clock, iter([word_cost * 3] + [word_cost] * 20))
    form = timed(bytes_, words, np.int64(1), clock)
    assert form.scan is words
    assert form.faster is faster
    assert form.byte_ns / form.word_ns == pytest.approx(byte_cost / word_cost)


def test_a_form_that_does_not_read_the_body_is_an_error() -> None:
    clock = _Clock()
    with pytest.raises(ValueError, match="word form"):
        timed(_stub(clock, iter([1.0] * 20)), _stub(clock, iter([1.0] * 20), 1), np.int64(1), clock)


def test_both_real_forms_read_the_calibration_body_alike() -> None:
    """The loader times the compiled forms; both read the same values."""
    form = body_scan.WORD_KERNEL.compile_now()
    assert isinstance(form, WordForm) and form.byte_ns > 0 and form.word_ns > 0
    raw = long_values_body()
    assert body_scan.digit_form(raw) is body_scan.WORD_DIGITS
    kernels = body_scan.KERNEL.compile_now()
    values = []
    for scan, last in ((kernels.scan, body_scan.BYTE_DIGITS), (form.scan, body_scan.WORD_DIGITS)):
        data = np.frombuffer(raw, dtype=np.uint8)
        out = np.zeros(6, dtype=np.int64)
        got = np.empty(len(raw), dtype=np.float32)
        counts, maps = np.empty(65, dtype=np.int64), np.empty(65, dtype=np.uint8)
        keys, ids = np.empty(2, dtype=np.int64), np.empty(len(raw) + 1, dtype=np.uint8)
        assert scan(data, got, counts, maps, keys, ids, out, last) == 0
        values.append(got[: out[3]].view(np.uint32).tolist())
    assert values[0] == values[1] and len(values[0]) == 64 * 32


def test_the_verdict_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="app.api.word_form"):
        word_form.chosen(WordForm(print, byte_ns=31.0, word_ns=36.0))
        word_form.chosen(WordForm(print, byte_ns=36.0, word_ns=24.0))
    assert "36.0 ns by words, 31.0 by bytes; the word form not used" in caplog.text
    assert "24.0 ns by words, 36.0 by bytes; the word form used for long numbers" in caplog.text
