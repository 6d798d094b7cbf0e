"""Writing LETOR text (also the synthetic generator's streaming writer) and reading it back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.generate_letor import generate, query_sizes, write
from trainer.data.dataset import RankingDataset
from trainer.data.letor import read_letor, write_letor
from trainer.data.letor_line import parse_line, strip_comment
from trainer.metrics.ndcg import mean_ndcg


def dataset(rng: np.random.Generator, sizes: list[int], width: int) -> RankingDataset:
    n = sum(sizes)
    features = (rng.normal(size=(n, width)) * 10.0 ** rng.integers(-8, 8, (n, width))).astype(
        np.float32
    )
    features[rng.random((n, width)) < 0.3] = 0.0
    features[rng.random((n, width)) < 0.05] = np.nan
    return RankingDataset(
        features=features,
        labels=rng.integers(0, 5, n).astype(np.float64),
        group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=rng.permutation(1000)[: len(sizes)].astype(np.int64),
        user_ids=np.array([f"u{i}" for i in range(len(sizes))]),
        positions=rng.integers(1, 30, n).astype(np.int64),
    )


def test_round_trip_is_exact(tmp_path: Path) -> None:
    original = dataset(np.random.default_rng(3), [3, 1, 5, 2], 7)
    original.features[:, -1] = 1.0  # so the width is known on reading
    write_letor(original, tmp_path / "d.txt")
    back = read_letor(tmp_path / "d.txt")
    np.testing.assert_array_equal(back.features, original.features)
    np.testing.assert_array_equal(back.labels, original.labels)
    np.testing.assert_array_equal(back.group_offsets, original.group_offsets)
    np.testing.assert_array_equal(back.query_ids, original.query_ids)
    assert back.user_ids is not None and original.user_ids is not None
    assert back.user_ids.tolist() == original.user_ids.tolist()
    assert back.positions is not None
    np.testing.assert_array_equal(back.positions, original.positions)


def test_non_integer_query_ids_are_written_as_ordinals(tmp_path: Path) -> None:
    original = dataset(np.random.default_rng(4), [2, 2], 3)
    original = RankingDataset(
        original.features, original.labels, original.group_offsets, np.array(["a", "b"])
    )
    write_letor(original, tmp_path / "d.txt")
    np.testing.assert_array_equal(read_letor(tmp_path / "d.txt", 3).query_ids, [0, 1])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    width=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
    forced=st.booleans(),
)
def test_scanner_agrees_with_reference_parser(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], width: int, seed: int, forced: bool
) -> None:
    """Whatever path a line takes (compiled scan or re-parse), the result is the reference's."""
    rng = np.random.default_rng(seed)
    original = dataset(rng, sizes, width)
    path = tmp_path_factory.mktemp("scan") / "d.txt"
    write_letor(original, path, significant_digits=int(rng.integers(1, 18)))
    rows = [parse_line(strip_comment(raw).decode()) for raw in path.read_bytes().splitlines()]
    if not forced:
        width = max(max(row.ids, default=0) for row in rows if row)
    data = read_letor(path, num_features=width if forced else None)
    expected = np.zeros((len(rows), width), dtype=np.float32)
    for i, row in enumerate(rows):
        assert row is not None
        expected[i, np.asarray(row.ids, dtype=np.int64) - 1] = row.values
    np.testing.assert_array_equal(data.features, expected)
    np.testing.assert_array_equal(data.labels, [row.label for row in rows if row])


def test_generator_file_holds_what_generate_returns(tmp_path: Path) -> None:
    write(rows=900, features=12, queries=300, seed=5, out=tmp_path / "g.txt")
    data = read_letor(tmp_path / "g.txt", num_features=12)
    expected = generate(900, 12, 300, seed=5)
    np.testing.assert_array_equal(data.features, expected.features)
    np.testing.assert_array_equal(data.labels, expected.labels)
    np.testing.assert_array_equal(data.group_offsets, expected.group_offsets)
    np.testing.assert_array_equal(data.query_ids, expected.query_ids)


def test_generator_sizes_and_signal() -> None:
    sizes = query_sizes(1000, 37, seed=1)
    assert sizes.sum() == 1000 and sizes.min() >= 1 and sizes.size == 37
    data = generate(3000, 10, 60, seed=2)
    assert set(np.unique(data.labels)) == {0.0, 1.0, 2.0, 3.0, 4.0}
    counts = np.bincount(data.labels.astype(int))
    assert counts[4] < counts[3] < counts[0]  # the best documents are the rarest
    assert not np.array_equal(data.features, generate(3000, 10, 60, seed=3).features)


@pytest.mark.slow
def test_generated_relevance_is_learnable() -> None:
    import lightgbm as lgb

    data = generate(3000, 20, 90, seed=0)
    train, test = data.subset_queries(np.arange(60)), data.subset_queries(np.arange(60, 90))
    params = {"objective": "lambdarank", "verbose": -1, "num_threads": 1, "seed": 0}
    model = lgb.train(
        params, lgb.Dataset(train.features, train.labels, group=train.group_sizes), 10
    )
    learned = mean_ndcg(
        np.asarray(model.predict(test.features)), test.labels, test.group_offsets, 10
    )
    chance = mean_ndcg(np.zeros(test.num_docs), test.labels, test.group_offsets, 10)
    assert learned > chance + 0.3
