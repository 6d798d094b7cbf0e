"""Exploration: on a share of answers the first result swaps with one from 2..depth, said in
the answer's reasons and logged with the impression; never inside an experiment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.api.exploration import Exploration
from tests.app.api.conftest import ClientFactory
from tests.app.api.test_rerank_experiment import body, read_log, start


def test_a_swap_moves_the_first_result_to_a_position_drawn_uniformly() -> None:
    exploration = Exploration(1.0, 4, np.random.default_rng(0))
    drawn = []
    for _ in range(3000):
        order = np.arange(10, dtype=np.int64)
        position = exploration.swap(order)
        assert position is not None and 2 <= position <= 4
        expected = np.arange(10)
        expected[[0, position - 1]] = [position - 1, 0]
        np.testing.assert_array_equal(order, expected)
        drawn.append(position)
    counts = np.bincount(drawn, minlength=5)[2:]
    assert counts.min() > 900  # 1,000 each expected


def test_the_share_of_answers_explored_and_short_lists() -> None:
    rng = np.random.default_rng(1)
    sometimes = Exploration(0.1, 10, rng)
    explored = sum(sometimes.swap(np.arange(5, dtype=np.int64)) is not None for _ in range(10000))
    assert 850 < explored < 1150
    never = Exploration(0.0, 10, rng)
    assert all(never.swap(np.arange(5, dtype=np.int64)) is None for _ in range(100))
    always = Exploration(1.0, 10, rng)
    assert always.swap(np.arange(1, dtype=np.int64)) is None  # nothing to swap with
    assert always.swap(np.arange(2, dtype=np.int64)) == 2  # depth past the list's end
    for share, depth in ((-0.1, 10), (1.5, 10), (0.5, 1)):
        with pytest.raises(ValueError):
            Exploration(share, depth)


def test_an_explored_answer_says_so_and_its_impression_logs_the_position(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    log = tmp_path / "imp.jsonl"
    settings = {"impressions_enabled": True, "impressions_jsonl": log}
    with make_client(**settings) as client:
        plain = client.post("/rerank", json=body(request_id="r0")).json()
    with make_client(**settings, exploration_share=1.0, exploration_depth=3) as client:
        explored = client.post("/rerank", json=body(request_id="r1", top_k=8)).json()
        metrics = client.get("/metrics").text
    assert "explored" not in plain["reasons"]
    ranked = [r["id"] for r in plain["results"]]
    served = [r["id"] for r in explored["results"]]
    assert explored["reasons"] == ["explored"] and explored["degraded"] is False
    position = served.index(ranked[0]) + 1
    assert position in (2, 3)
    swapped = ranked[:8]
    swapped[0], swapped[position - 1] = swapped[position - 1], swapped[0]
    assert served == swapped
    scores = {r["id"]: r["score"] for r in plain["results"]}
    assert [r["score"] for r in explored["results"]] == [scores[i] for i in served]
    assert [r["rank"] for r in explored["results"]] == list(range(1, 9))
    records = {r["request_id"]: r for r in read_log(log, 2) if r["kind"] == "impression"}
    assert "explored" not in records["r0"]
    assert records["r1"]["explored"] == position and records["r1"]["ids"] == served
    assert 'ltr_explored_answers_total{model="m"} 1.0' in metrics


def test_answers_in_an_experiment_are_not_explored(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    start(registry_dir, "interleave")
    with make_client(exploration_share=1.0) as client:
        answer = client.post("/rerank", json=body(request_id="r1", explain=True)).json()
    assert answer["experiment"]["mode"] == "interleave"
    assert "explored" not in answer["reasons"]
