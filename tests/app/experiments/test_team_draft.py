from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.experiments.spec import BOTH, CANDIDATE, CONTROL
from app.experiments.team_draft import (
    coin_flips,
    common_prefix,
    draft,
    team_draft,
    team_draft_batch,
)


@st.composite
def two_rankings(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    same = draw(st.booleans())
    a = rng.permutation(n)
    b = a.copy() if same else rng.permutation(n)
    return a, b, rng.random(n) < 0.5


@settings(max_examples=200, deadline=None)
@given(two_rankings(), st.integers(1, 40))
def test_team_draft_rule(case: tuple[np.ndarray, np.ndarray, np.ndarray], k: int) -> None:
    a, b, coins = case
    merged, teams = draft(a, b, coins, k)
    n = a.size
    assert len(merged) == len(teams) == min(k, n)
    assert len(set(merged)) == len(merged)  # no item twice
    taken: set[int] = set()
    picks = {CONTROL: 0, CANDIDATE: 0}
    for item, team in zip(merged, teams, strict=True):
        # Teams never differ by more than one pick.
        picks[team] += 1
        assert abs(picks[CONTROL] - picks[CANDIDATE]) <= 1
        # Each pick is the team's best item not yet taken.
        ranking = a if team == CONTROL else b
        assert item == next(int(x) for x in ranking if int(x) not in taken)
        taken.add(item)


def test_identical_rankings_are_served_unchanged() -> None:
    a = np.array([3, 1, 4, 0, 2])
    merged, teams = team_draft(a, a.copy(), coin_flips(b"seed", 5))
    assert merged == a.tolist()
    assert teams == [BOTH] * 5  # nothing to tell the rankers apart by


def test_coins_decide_who_picks_first() -> None:
    a, b = np.array([0, 1, 2, 3]), np.array([3, 2, 1, 0])
    assert team_draft(a, b, np.array([True, False]))[0] == [3, 0, 1, 2]
    assert team_draft(a, b, np.array([False, True]))[0] == [0, 3, 2, 1]
    assert coin_flips(b"abc", 8).tolist() == coin_flips(b"abc", 8).tolist()


def test_first_position_goes_to_either_team_half_the_time() -> None:
    a, b = np.arange(10), np.arange(10)[::-1].copy()
    firsts = [team_draft(a, b, coin_flips(i, 6), 1)[1][0] for i in range(2000)]
    assert 0.45 < np.mean(firsts) < 0.55


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 12), st.integers(1, 20), st.integers(0, 2**32 - 1))
def test_batch_equals_the_per_request_merge(m: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = np.argsort(rng.random((m, n)), axis=1)
    b = np.argsort(rng.random((m, n)), axis=1)
    b[0] = a[0]
    coins = rng.random((m, n)) < 0.5
    merged, teams = team_draft_batch(a, b, coins)
    for r in range(m):
        one_merged, one_teams = team_draft(a[r], b[r], coins[r])
        assert merged[r].tolist() == one_merged
        assert teams[r].tolist() == one_teams


@settings(max_examples=100, deadline=None)
@given(two_rankings(), st.integers(1, 40))
def test_the_common_prefix_is_credited_to_neither_team(
    case: tuple[np.ndarray, np.ndarray, np.ndarray], k: int
) -> None:
    a, b, coins = case
    b[: a.size // 2] = a[: a.size // 2]  # share at least half the top
    b[a.size // 2 :] = np.random.default_rng(k).permutation(a[a.size // 2 :])
    merged, teams = team_draft(a, b, coins, k)
    plain_merged, plain_teams = draft(a, b, coins, k)
    assert merged == plain_merged  # the served list is team draft's own
    p = common_prefix(a, b, len(merged))
    assert merged[:p] == a[:p].tolist()
    assert teams[:p] == [BOTH] * p
    assert all(t in (BOTH, plain) for t, plain in zip(teams[p:], plain_teams[p:], strict=True))


@settings(max_examples=200, deadline=None)
@given(two_rankings(), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_a_round_is_credited_to_neither_exactly_when_either_coin_serves_it_alike(
    case: tuple[np.ndarray, np.ndarray, np.ndarray], k: int, seed: int
) -> None:
    a, _, coins = case
    # Versions that agree on much of the order, as successive versions of a model do.
    rng = np.random.default_rng(seed)
    b = a.copy()
    for i in rng.choice(a.size, size=min(3, a.size), replace=False):
        j = min(i + 1, a.size - 1)
        b[i], b[j] = b[j], b[i]
    merged, teams = team_draft(a, b, coins, k)
    prefix = common_prefix(a, b, len(merged))
    for start in range(0, len(merged), 2):
        flipped = coins.copy()
        flipped[start // 2] = ~flipped[start // 2]
        served_alike = draft(a, b, flipped, k)[0] == merged
        in_prefix = start + 1 < prefix or (start + 1 == len(merged) and start < prefix)
        both = [teams[i] == BOTH for i in range(start, min(start + 2, len(merged)))]
        if served_alike or in_prefix:
            assert all(both)
        else:
            assert not any(both[i] for i in range(len(both)) if start + i >= prefix)


def test_clicks_on_rounds_served_alike_count_for_neither() -> None:
    a = np.array([0, 1, 2, 3, 4, 5])
    b = np.array([1, 0, 2, 3, 5, 4])  # the same picks in round two, whatever the coin
    for bits in ([True, False, True], [False, True, False]):
        merged, teams = team_draft(a, b, np.array(bits))
        assert merged[2:4] == [2, 3]
        assert teams[2:4] == [BOTH, BOTH]
        assert BOTH not in teams[:2] + teams[4:]
