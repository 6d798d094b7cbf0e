from __future__ import annotations

import numpy as np
import pytest

from trainer.experiments.statistics import (
    ArmTotals,
    ab_result,
    interleaving_result,
    msprt_p,
    ratio_and_variance,
    sign_test_p,
)


def test_always_valid_p_keeps_its_level_under_many_looks() -> None:
    """Under no preference, rejecting at the first of 30 looks with p < 0.05 happens in at
    most ~5 % of experiments (Ville's inequality); the fixed-horizon test peeked at as often
    rejects far more."""
    rng = np.random.default_rng(0)
    runs, n = 400, 6000
    outcomes = rng.choice(np.array([-1.0, 1.0]), size=(runs, n))
    looks = np.unique(np.geomspace(200, n, 30).astype(int))
    sums = np.cumsum(outcomes, axis=1)[:, looks - 1]
    valid = fixed = 0
    for row in sums:
        # +-1 outcomes: mean = sum / k, second moment 1, so the null sd of one outcome is 1.
        valid += any(msprt_p(s / k, 1.0 / k, 1.0) < 0.05 for s, k in zip(row, looks, strict=True))
        fixed += any(abs(s) / np.sqrt(k) > 1.96 for s, k in zip(row, looks, strict=True))
    assert valid / runs <= 0.05
    assert fixed / runs > 2 * valid / runs


def test_a_real_preference_is_found() -> None:
    rng = np.random.default_rng(1)
    s = np.where(rng.random(4000) < 0.58, 1, -1)
    r = interleaving_result(s, impressions=10_000)
    assert r.wins + r.losses == 4000 and r.impressions == 10_000
    assert 0.06 < r.preference < 0.1 and r.ci_low < r.preference < r.ci_high
    assert r.p_value < 1e-6 and r.p_always_valid < 1e-4
    assert interleaving_result(-s).preference == pytest.approx(-r.preference)


def test_sign_test_and_empty_inputs() -> None:
    assert sign_test_p(60, 40) == pytest.approx(0.0569, abs=1e-3)
    assert sign_test_p(0, 0) == 1.0
    empty = interleaving_result(np.array([], dtype=np.int8), impressions=7)
    assert empty.impressions == 7 and empty.p_value == 1.0 and empty.p_always_valid == 1.0
    assert msprt_p(0.1, 0.0, 1.0) == 1.0


def test_delta_method_matches_the_plain_variance_for_one_impression_per_unit() -> None:
    rng = np.random.default_rng(2)
    y = rng.poisson(0.8, 5000).astype(float)
    ratio, var, sd = ratio_and_variance(ArmTotals(np.ones(5000), y))
    assert ratio == pytest.approx(y.mean())
    assert var == pytest.approx(y.var(ddof=1) / 5000)
    assert sd == pytest.approx(y.std(ddof=1), rel=1e-6)


def test_ab_result_finds_a_click_lift_and_not_a_null() -> None:
    rng = np.random.default_rng(3)
    units = 20_000
    imps = rng.integers(1, 5, size=(2, units)).astype(float)
    control = ArmTotals(imps[0], rng.poisson(0.5 * imps[0]).astype(float))
    better = ArmTotals(imps[1], rng.poisson(0.56 * imps[1]).astype(float))
    r = ab_result("clicks", control, better)
    assert r.difference > 0 and r.p_value < 1e-6 and r.p_always_valid < 1e-3
    assert r.ci_low < 0.06 < r.ci_high and r.relative == pytest.approx(r.difference / r.control)
    same = ArmTotals(imps[1], rng.poisson(0.5 * imps[1]).astype(float))
    assert ab_result("clicks", control, same).p_always_valid > 0.05
