"""The serving path's merge (pick schedule from the coins, prefix-only reads, teams as an
array) against a straightforward team draft: same inputs and seed, same merged list and teams."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.experiments.serving import rank_in_experiment, ranking_order
from app.experiments.spec import BOTH, CANDIDATE, CONTROL
from app.experiments.team_draft import coin_flips, draft, team_draft, team_draft_arrays
from app.registry.experiments import ActiveExperiment
from tests.support.experiments import interleave_spec


def reference_team_draft(
    control: list[int], candidate: list[int], coins: list[bool], k: int
) -> tuple[list[int], list[int]]:
    """Radlinski et al. 2008 as written, round by round: the coin's team adds its best result
    not yet taken, then the other team does. A round is credited to neither team (BOTH) when
    the other coin would have served the same results from the same state, and so is the
    rankings' common prefix."""
    merged: list[int] = []
    teams: list[int] = []
    alike: list[bool] = []
    flips = iter(coins)
    k = min(k, len(control))

    def play(first: int) -> tuple[list[int], list[int]]:
        order = [first, 1 - first][: k - len(merged)]
        taken = list(merged)
        for team in order:
            ranking = candidate if team == CANDIDATE else control
            taken.append(next(x for x in ranking if x not in taken))
        return taken[len(merged) :], order

    while len(merged) < k:
        first = CANDIDATE if next(flips) else CONTROL
        picks, order = play(first)
        alike += [picks == play(1 - first)[0]] * len(picks)
        merged += picks
        teams += order
    prefix = 0
    while prefix < k and control[prefix] == candidate[prefix]:
        prefix += 1
    return merged, [BOTH if i < prefix or alike[i] else t for i, t in enumerate(teams)]


@st.composite
def rankings(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, bytes]:
    n = draw(st.integers(1, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    items = rng.choice(10 * n, size=n, replace=False)  # any ids, not only 0..n-1
    a = rng.permutation(items)
    shared = draw(st.integers(0, n))  # rankings that agree on a prefix, as versions do
    b = np.concatenate([a[:shared], rng.permutation(a[shared:])])
    return a, b, draw(st.binary(min_size=1, max_size=16))


@settings(max_examples=300, deadline=None)
@given(rankings(), st.integers(1, 70))
def test_fast_draft_equals_the_reference(
    case: tuple[np.ndarray, np.ndarray, bytes], k: int
) -> None:
    a, b, seed = case
    coins = coin_flips(seed, (min(k, a.size) + 1) // 2 + 1)
    want = reference_team_draft(a.tolist(), b.tolist(), coins.tolist(), k)
    assert team_draft(a, b, coins, k) == want
    merged, teams = team_draft_arrays(a, b, coins, k)
    assert (merged, teams.tolist()) == want
    assert teams.dtype == np.int8
    # The same seed gives the same coins, hence the same list and teams.
    assert team_draft(a, b, coin_flips(seed, coins.size), k) == want
    # Without the rules for BOTH, teams are the pickers'.
    assert draft(a, b, coins, k)[0] == want[0]


def _rank(scores: dict[int, np.ndarray], request_id: str, top_k: int | None) -> Any:
    spec = interleave_spec(name="fast")
    control, candidate = (
        SimpleNamespace(manifest=SimpleNamespace(user_clusters=None)) for _ in "ab"
    )
    by_model = {id(control): scores[0], id(candidate): scores[1]}
    features = np.zeros((scores[0].size, 2))

    class Score:
        def inline(self, rows: int) -> bool:
            return rows % 2 == 0  # every path: on the loop (one thread or two), in threads

        def beside_pays(self, m: Any, rows: int) -> bool:
            return rows % 4 == 0

        def prepare_beside(self, m: Any, x: np.ndarray, u: np.ndarray | None) -> None:
            return None  # tests/app/scoring/test_beside.py covers the native worker

        def now(
            self, m: Any, x: np.ndarray, u: np.ndarray | None, learn: bool = False
        ) -> np.ndarray:
            return by_model[id(m)]

        async def __call__(self, m: Any, x: np.ndarray, u: np.ndarray | None) -> np.ndarray:
            return by_model[id(m)]

    async def inputs(m: Any) -> tuple[np.ndarray, np.ndarray | None, None]:
        return features, None, None

    active = ActiveExperiment(spec, candidate)
    return asyncio.run(
        rank_in_experiment(
            active, control, None, request_id, (features, None), inputs, Score(), top_k
        )
    )


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 400), st.integers(1, 400), st.integers(0, 2**32 - 1))
def test_served_merge_equals_the_reference(n: int, top_k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    control = rng.integers(0, 50, n).astype(np.float64)  # ties, as real scores have
    candidate = np.where(rng.random(n) < 0.5, control, rng.standard_normal(n))
    request = f"r{seed}"
    for k in (None, top_k):
        ranked = _rank({0: control, 1: candidate}, request, k)
        length = n if k is None else min(k, n)
        coins = coin_flips(f"salt\x1f{request}".encode(), (length + 1) // 2 + 1)
        want = reference_team_draft(
            ranking_order(control).tolist(),
            ranking_order(candidate).tolist(),
            coins.tolist(),
            length,
        )
        assert (ranked.order, ranked.teams) == want
        assert ranked.log["teams"] == want[1]
        shown = [
            (control if team == CONTROL else candidate)[item]
            for item, team in zip(*want, strict=True)
        ]
        assert ranked.scores[ranked.order].tolist() == shown
        # A retried request gets the same list and teams.
        again = _rank({0: control, 1: candidate}, request, k)
        assert (again.order, again.teams) == (ranked.order, ranked.teams)
