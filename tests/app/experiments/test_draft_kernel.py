"""The compiled rankings and merge (app.experiments.draft_kernel) against the Python team draft
they stand in for: same merged list, teams and shown scores, ties, NaN, infinities and signed
zeros included; and requests merge in Python until the background compile is done."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.experiments import draft_kernel
from app.experiments.serving import merge_rankings


@pytest.fixture(scope="module")
def kernel() -> object:
    return draft_kernel.compile_now()


def _python_merge(
    control: np.ndarray, candidate: np.ndarray, seed: bytes, top_k: int | None
) -> tuple[list[int], np.ndarray, np.ndarray]:
    compiled, draft_kernel.KERNEL._kernel = draft_kernel.KERNEL._kernel, None
    try:
        return merge_rankings(control, candidate, seed, top_k)
    finally:
        draft_kernel.KERNEL._kernel = compiled


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 400),
    st.one_of(st.none(), st.integers(0, 450)),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.0, 0.5, 0.9, 1.0]),
)
def test_kernel_equals_the_python_merge(
    kernel: object, n: int, top_k: int | None, seed: int, same: float
) -> None:
    rng = np.random.default_rng(seed)
    control = rng.integers(0, 30, n).astype(np.float64)  # ties, as real scores have
    control[rng.random(n) < 0.05] = np.nan
    special = rng.random(n) < 0.05  # infinities and signed zeros tie with their like
    control[special] = rng.choice([np.inf, -np.inf, 0.0, -0.0], int(special.sum()))
    candidate = np.where(rng.random(n) < same, control, rng.standard_normal(n))
    request = f"salt\x1fr{seed}".encode()
    assert draft_kernel.ready() is kernel
    got = merge_rankings(control, candidate, request, top_k)
    want = _python_merge(control, candidate, request, top_k)
    assert got[0] == want[0]
    assert got[1].dtype == want[1].dtype == np.int8
    assert got[1].tolist() == want[1].tolist()
    np.testing.assert_array_equal(got[2], want[2])  # NaN where both have NaN


def test_identical_rankings_are_all_common_prefix(kernel: object) -> None:
    scores = np.arange(50, dtype=np.float64)
    merged, teams, shown = merge_rankings(scores, scores.copy(), b"x", 10)
    assert merged == list(range(49, 39, -1))
    assert set(teams.tolist()) == {2}  # BOTH
    np.testing.assert_array_equal(shown, scores)


def test_requests_merge_in_python_until_the_kernel_is_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(draft_kernel.KERNEL, "_kernel", None)
    monkeypatch.setattr(draft_kernel.KERNEL, "_started", True)  # a compile "in progress"
    draft_kernel.compile_later()  # no second thread
    assert draft_kernel.ready() is None
    control = np.array([3.0, 1.0, 2.0])
    merged, teams, shown = merge_rankings(control, -control, b"seed", None)
    assert sorted(merged) == [0, 1, 2] and len(teams) == 3
    for item, team in zip(merged, teams.tolist(), strict=True):
        assert shown[item] == (control[item] if team == 0 else -control[item])
