from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.clicks.conftest import pbm_clicks
from trainer.clicks.propensity import (
    ctr_by_position,
    estimate_from_dataset,
    estimate_propensities,
    load_propensities,
    non_increasing,
    pool_positions,
    write_propensities,
)
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError


def test_ctr_by_position() -> None:
    ctr, shown = ctr_by_position(np.array([1, 1, 2, 4]), np.array([1, 0, 1, 1]), 3)
    np.testing.assert_array_equal(shown, [2, 1, 0])
    np.testing.assert_array_equal(ctr[:2], [0.5, 1.0])
    assert np.isnan(ctr[2])


def test_regression_em_recovers_theta_where_ctr_does_not() -> None:
    sim = pbm_clicks(4000, docs=10, eta=1.0, seed=1)
    est = estimate_propensities(sim.positions, sim.clicks, features=sim.features)
    err = np.abs(est.theta - sim.theta) / sim.theta
    ctr_err = np.abs(est.ctr / est.ctr[0] - sim.theta) / sim.theta
    assert est.theta[0] == 1.0
    assert err.mean() < 0.08, est.theta
    assert ctr_err.mean() > 2 * err.mean()  # the logging ranker puts relevant docs on top


def test_pairs_em_with_repeated_documents() -> None:
    # 200 queries x 10 docs, each list served 20 times in fresh random orders.
    rng = np.random.default_rng(3)
    relevance = rng.random(2000)
    keys = np.tile(np.arange(2000), 20)
    positions = np.concatenate(
        [np.argsort(rng.random((200, 10)), axis=1).ravel() + 1 for _ in range(20)]
    )
    theta = 1.0 / np.arange(1, 11) ** 0.7
    clicks = rng.random(keys.size) < theta[positions - 1] * relevance[keys]
    est = estimate_propensities(positions, clicks, keys=keys, relevance="pairs")
    assert np.abs(est.theta - theta).max() < 0.06, est.theta


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="1-based"):
        estimate_propensities(np.array([0, 1]), np.array([0, 1]), features=np.zeros((2, 1)))
    with pytest.raises(ValueError, match="needs features"):
        estimate_propensities(np.array([1, 2]), np.array([0, 1]))
    with pytest.raises(ValueError, match="needs keys"):
        estimate_propensities(np.array([1, 2]), np.array([0, 1]), relevance="pairs")


def test_file_round_trip_and_truth_json(tmp_path: Path) -> None:
    sim = pbm_clicks(300, docs=5, seed=2)
    est = estimate_propensities(sim.positions, sim.clicks, features=sim.features, iterations=6)
    write_propensities(tmp_path / "p.json", est, note="x")
    theta, ctr = load_propensities(tmp_path / "p.json")
    np.testing.assert_allclose(theta, est.theta, atol=1e-6)
    assert ctr is not None and ctr.shape == theta.shape
    truth = {"clicks": {"theta": [1.0, 0.5, 0.25]}, "config": {}}
    (tmp_path / "truth.json").write_text(json.dumps(truth))
    assert load_propensities(tmp_path / "truth.json")[0].tolist() == [1.0, 0.5, 0.25]


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("{", "not a readable JSON"),
        ('{"theta": []}', "no 'theta' list"),
        ('{"theta": [1.0, 0.0]}', r"theta\[1\] = 0.0"),
        ('{"theta": [1.0, "x"]}', r"theta\[1\] = 'x'"),
    ],
)
def test_bad_propensity_files(tmp_path: Path, content: str, what: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=what):
        load_propensities(path)
    with pytest.raises(DataFormatError, match="no such file"):
        load_propensities(tmp_path / "absent.json")


def test_estimate_from_dataset() -> None:
    sim = pbm_clicks(2000, docs=6, seed=7)
    labels = sim.clicks.astype(np.float64) * 2.0  # purchases count as clicks too
    data = RankingDataset(
        sim.features, labels, sim.offsets, np.arange(2000), positions=sim.positions
    )
    est = estimate_from_dataset(data)
    assert np.abs(est.theta - sim.theta).max() < 0.1
    with pytest.raises(ValueError, match="no served positions"):
        estimate_from_dataset(RankingDataset(sim.features, labels, sim.offsets, np.arange(2000)))


def _sparse_tail_clicks(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, clicks, features) of 300 lists of 30 under PBM with theta_k = 1/k: positions
    past about 15 get a click or none, as in a small log."""
    sim = pbm_clicks(300, docs=30, eta=1.0, seed=seed)
    return sim.positions, sim.clicks, sim.features


def test_positions_without_clicks_get_no_absurd_weight() -> None:
    positions, clicks, features = _sparse_tail_clicks()
    per_position = np.bincount(positions - 1, weights=clicks)
    assert (per_position == 0).any()  # the situation of the report: positions with no click
    est = estimate_propensities(positions, clicks, features=features)
    truth = 1.0 / np.arange(1, 31)
    # Before pooling, theta was 1e-6 at every position without clicks (a weight of 10^6).
    assert est.theta.min() > 0.2 * truth.min(), est.theta
    assert (1.0 / est.theta).max() < 100.0
    assert np.abs(np.log(est.theta / truth)).mean() < 0.2  # was 1.5 with the zeros
    assert np.all(np.diff(est.theta) <= 0), est.theta  # examination falls with position
    # Every group of positions sharing one theta rests on at least min_clicks clicks.
    group_clicks = np.bincount(est.groups, weights=est.clicks)
    assert group_clicks.min() >= est.min_clicks
    assert est.sparse_positions() == [k + 1 for k in np.flatnonzero(per_position < 10)]
    pooled = est.pooled_ranges()
    assert pooled and pooled[-1][1] == 30  # the tail is pooled up to the last position


def test_pooling_keeps_positions_with_enough_clicks_apart() -> None:
    sim = pbm_clicks(4000, docs=10, eta=1.0, seed=1)
    est = estimate_propensities(sim.positions, sim.clicks, features=sim.features)
    assert est.pooled_ranges() == [] and est.sparse_positions() == []
    assert np.unique(est.theta).size == 10


def test_pool_positions_and_non_increasing() -> None:
    np.testing.assert_array_equal(
        pool_positions(np.array([12, 3, 8, 0, 11, 2]), 10), [0, 1, 1, 2, 2, 2]
    )
    np.testing.assert_array_equal(pool_positions(np.array([4, 3]), 10), [0, 0])
    np.testing.assert_array_equal(pool_positions(np.array([10, 10]), 10), [0, 1])
    fit = non_increasing(np.array([1.0, 0.2, 0.4, 0.1]), np.array([1.0, 1.0, 3.0, 1.0]))
    np.testing.assert_allclose(fit, [1.0, 0.35, 0.35, 0.1])
    with pytest.raises(ValueError, match="min_clicks"):
        estimate_propensities(
            np.array([1, 2]), np.array([0, 1]), features=np.zeros((2, 1)), min_clicks=0
        )


def test_file_records_clicks_and_pooled_positions(tmp_path: Path) -> None:
    positions, clicks, features = _sparse_tail_clicks(2)
    est = estimate_propensities(positions, clicks, features=features)
    write_propensities(tmp_path / "p.json", est)
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["clicks"] == est.clicks.tolist() and doc["min_clicks"] == 10
    assert doc["pooled_positions"] == [list(r) for r in est.pooled_ranges()]
    np.testing.assert_allclose(load_propensities(tmp_path / "p.json")[0], est.theta, atol=1e-6)
