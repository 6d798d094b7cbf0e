"""The word-at-a-time byte helpers agree with a byte-by-byte reading, at every offset and
length around a word's edges, and write nothing outside their range."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.api.byte_words import copy_bytes, first_of, repeated

_QUOTES, _BACKSLASHES = repeated(34), repeated(92)


@numba.njit(cache=True)
def _first_quote_or_backslash(array: np.ndarray, i: int) -> int:
    return first_of(array, i, 34, 92, _QUOTES, _BACKSLASHES)  # type: ignore[no-any-return]


@numba.njit(cache=True)
def _copy(dest: np.ndarray, w: int, src: np.ndarray, start: int, stop: int) -> int:
    return copy_bytes(dest, w, src, start, stop)  # type: ignore[no-any-return]


# Bytes that match neither target, and bytes that differ from a target by one bit or by the
# high bit alone (the SWAR test's borrow and sign cases).
_OTHER = [0, 1, 33, 35, 91, 93, 0x80, 34 | 0x80, 92 | 0x80, 0xFF, ord("a")]


@hypothesis_settings(max_examples=400, deadline=None)
@given(
    filler=st.lists(st.sampled_from(_OTHER), min_size=0, max_size=40),
    target=st.sampled_from([34, 92]),
    after=st.lists(st.sampled_from([*_OTHER, 34, 92]), max_size=20),
    start=st.integers(0, 40),
)
def test_first_of_finds_the_first_match(
    filler: list[int], target: int, after: list[int], start: int
) -> None:
    array = np.array([*filler, target, *after], dtype=np.uint8)
    start = min(start, len(filler))
    want = start + next(k for k, b in enumerate(array[start:].tolist()) if b in (34, 92))
    assert _first_quote_or_backslash(array, start) == want


@pytest.mark.parametrize("length", range(0, 26))
@pytest.mark.parametrize("offset", range(0, 9))
def test_copy_bytes_copies_exactly_its_range(length: int, offset: int) -> None:
    rng = np.random.default_rng(length * 10 + offset)
    src = rng.integers(0, 256, size=offset + length + 3, dtype=np.uint8)
    dest = np.full(length + 16, 0xAA, dtype=np.uint8)
    end = _copy(dest, 5, src, offset, offset + length)
    assert end == 5 + length
    assert dest[5:end].tolist() == src[offset : offset + length].tolist()
    assert (dest[:5] == 0xAA).all() and (dest[end:] == 0xAA).all()


def test_copy_bytes_reads_nothing_past_the_source() -> None:
    """The last bytes of a source that ends mid-word are copied one at a time."""
    src = np.arange(11, dtype=np.uint8)
    dest = np.zeros(11, dtype=np.uint8)
    assert _copy(dest, 0, src, 0, 11) == 11
    assert dest.tolist() == list(range(11))
