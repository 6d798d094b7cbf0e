"""What an explanation shows of each value: the float32 the model saw, as its shortest decimal."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from app.explain.ranked import shown_values
from app.explain.top import largest


def by_str(value: float) -> float | str | None:
    """The definition: numpy's shortest decimal of the float32, parsed back."""
    if np.isnan(value):
        return None
    if np.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(str(np.float32(value)))


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64), st.integers(1, 4))
def test_every_float32_is_shown_as_its_shortest_decimal(bits: list[int], width: int) -> None:
    values = np.array(bits, dtype=np.uint32).view(np.float32)
    values = np.resize(values, (-(-len(values) // width), width))  # every bit pattern: NaNs too
    shown = shown_values(values)
    expected = [[by_str(v) for v in row] for row in values.tolist()]
    assert shown == expected
    signs = [[np.signbit(v) for v in row if isinstance(v, float)] for row in shown]
    assert signs == [[np.signbit(v) for v in row if isinstance(v, float)] for row in expected]


def test_named_values() -> None:
    x = np.array([[0.1, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4028235e38]], dtype=np.float32)
    assert shown_values(x) == [[0.1, -0.0, "Infinity", "-Infinity", None, 1e-45, 3.4028235e38]]


def test_largest_skips_zero_contributions_and_keeps_feature_order_in_ties() -> None:
    c = np.array([0.5, -2.0, 0.0, 0.5, -0.5, 0.0])
    assert largest(c, 10) == [1, 0, 3, 4]
    assert largest(c, 2) == [1, 0]
    assert largest(np.zeros(3), 5) == []
