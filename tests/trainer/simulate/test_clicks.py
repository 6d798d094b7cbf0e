"""Clicks follow the position-based model with the examination curve written to truth.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainer.simulate import SimulationConfig, SimulationSummary
from trainer.simulate.clicks import ClickModel
from trainer.simulate.generator import World, generate_chunks

POSITIONS = 10


def _per_position(
    config: SimulationConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, ClickModel]:
    """Sums over documents at positions 1..10 of clicks, attractiveness and its variance term."""
    world = World.build(config)
    assert world.click_model is not None
    clicks = np.zeros(POSITIONS)
    attract = np.zeros(POSITIONS)
    variance = np.zeros(POSITIONS)
    for chunk in generate_chunks(world):
        assert chunk.positions is not None and chunk.clicks is not None
        top = chunk.positions <= POSITIONS
        pos = chunk.positions[top] - 1
        a = world.click_model.attractiveness(chunk.labels[top])
        p = world.click_model.examination(chunk.positions[top]) * a
        clicks += np.bincount(pos, weights=chunk.clicks[top], minlength=POSITIONS)
        attract += np.bincount(pos, weights=a, minlength=POSITIONS)
        variance += np.bincount(pos, weights=p * (1 - p), minlength=POSITIONS)
    return clicks, attract, variance, world.click_model


@pytest.mark.parametrize("eta", [1.0, 2.0, 0.5])
def test_click_through_by_position_follows_the_examination_curve(eta: float) -> None:
    config = SimulationConfig(rows=400_000, users=300, seed=11, clicks=True, eta=eta)
    clicks, attract, variance, model = _per_position(config)
    theta = model.examination(np.arange(1, POSITIONS + 1))
    np.testing.assert_allclose(theta, (1.0 / np.arange(1, POSITIONS + 1)) ** eta)
    # clicks / attractiveness estimates theta_k; 4 standard errors of the binomial sum, on the
    # positions examined often enough for the sample to pin theta_k down to 25%.
    seen = theta >= 0.1
    estimate = clicks[seen] / attract[seen]
    tolerance = 4.0 * np.sqrt(variance[seen]) / attract[seen]
    assert np.all(tolerance < 0.25 * theta[seen])
    assert np.all(np.abs(estimate - theta[seen]) <= tolerance), (estimate, theta, tolerance)


def test_logging_policy_puts_better_documents_higher() -> None:
    config = SimulationConfig(rows=30_000, users=100, seed=2, clicks=True)
    world = World.build(config)
    label_at = np.zeros((2, 2))
    for chunk in generate_chunks(world):
        assert chunk.positions is not None
        for row, (lo, hi) in enumerate([(1, 3), (8, 10)]):
            at = (chunk.positions >= lo) & (chunk.positions <= hi)
            label_at[row] += (chunk.labels[at].sum(), at.sum())
    top, lower = label_at[:, 0] / label_at[:, 1]
    assert top > lower + 0.3


def test_truth_records_the_click_model(parquet_run: tuple[Path, SimulationSummary]) -> None:
    truth = json.loads((parquet_run[0] / "truth.json").read_text())["clicks"]
    max_docs = json.loads((parquet_run[0] / "truth.json").read_text())["config"]["docs_per_query"][
        1
    ]
    eta, eps = truth["eta"], truth["epsilon"]
    np.testing.assert_allclose(truth["theta"], (1.0 / np.arange(1, max_docs + 1)) ** eta)
    expected = eps + (1 - eps) * (2.0 ** np.arange(5) - 1) / 15.0
    np.testing.assert_allclose(truth["attractiveness"], expected)


def test_no_click_columns_without_clicks(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from trainer.simulate import simulate

    config = SimulationConfig(rows=2_000, users=50, format="letor")
    simulate(config, tmp_path / "letor")
    assert sorted(p.name for p in (tmp_path / "letor").glob("train.txt*")) == [
        "train.txt",
        "train.txt.user",
    ]
    assert json.loads((tmp_path / "letor" / "truth.json").read_text())["clicks"] is None
    simulate(config.model_copy(update={"format": "parquet"}), tmp_path / "parquet")
    columns = pq.read_schema(tmp_path / "parquet" / "train.parquet").names
    assert columns[:3] == ["qid", "label", "user_id"]
    assert "position" not in columns and "click" not in columns
