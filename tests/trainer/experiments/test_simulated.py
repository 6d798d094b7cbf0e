"""The online simulator: deterministic model versions with correlated errors, and the
click-difference test it compares with the sign test `decide` uses."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.experiments.simulated import (
    INTERLEAVING_TESTS,
    OnlineWorld,
    Ranker,
    simulate_experiment,
)
from trainer.experiments.statistics import click_difference_result
from trainer.simulate.config import SimulationConfig


@pytest.fixture(scope="module")
def world() -> OnlineWorld:
    return OnlineWorld(SimulationConfig(users=2000, seed=3), pool_queries=4000, seed=3)


def test_a_version_ranks_a_query_the_same_every_time(world: OnlineWorld) -> None:
    version = Ranker(1.6, seed=11, correlation=0.5)
    assert np.array_equal(world.order(version), world.order(version))
    other = Ranker(1.6, seed=12, correlation=0.5)
    assert not np.array_equal(world.order(version), world.order(other))


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_two_versions_errors_have_the_requested_correlation(world: OnlineWorld, rho: float) -> None:
    a = world.scores(Ranker(1.6, 1, rho)) - world.pool.base
    b = world.scores(Ranker(1.2, 2, rho)) - world.pool.base
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] == pytest.approx(rho, abs=0.02)
    assert a.std() == pytest.approx(1.6, rel=0.02) and b.std() == pytest.approx(1.2, rel=0.02)


def test_less_noise_is_better_and_calibration_finds_it(world: OnlineWorld) -> None:
    control = world.true_ndcg(world.order(Ranker(1.6, 1, 0.8)))
    noise = world.noise_for(control + 0.02, seed=2, correlation=0.8)
    assert noise < 1.6
    assert world.true_ndcg(world.order(Ranker(noise, 2, 0.8))) == pytest.approx(
        control + 0.02, abs=1e-3
    )


def test_a_much_better_candidate_is_found_by_every_test(world: OnlineWorld) -> None:
    trace = simulate_experiment(
        world, Ranker(4.0, 1, 0.5), Ranker(0.3, 2, 0.5), seed=0, max_impressions=20_000
    )
    assert trace.candidate_ndcg > trace.control_ndcg
    for name in INTERLEAVING_TESTS:
        assert trace.tests_valid[name] is not None and trace.tests_sign[name] == 1
    assert trace.interleave_valid == trace.tests_valid["click_difference"]
    assert trace.ab_valid is not None and trace.ab_sign == 1
    assert trace.looks[-1] == trace.impressions


def test_click_difference_test() -> None:
    rng = np.random.default_rng(0)
    null = rng.choice(np.array([-2, -1, 1, 2]), size=5000)
    assert click_difference_result(null)[1] > 0.05
    shifted = null + (rng.random(5000) < 0.1)
    mean, p = click_difference_result(shifted)
    assert mean > 0 and p < 1e-3
    assert click_difference_result(np.array([], dtype=np.int64)) == (0.0, 1.0)
