"""The simulator's files read back through the product's loader, identically in both formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from trainer.data.loader import load_dataset
from trainer.simulate import SimulationSummary
from trainer.simulate.letor_text import format_letor


@pytest.mark.parametrize("split", ["train", "vali", "test"])
def test_letor_and_parquet_hold_the_same_data(
    parquet_run: tuple[Path, SimulationSummary],
    letor_run: tuple[Path, SimulationSummary],
    split: str,
) -> None:
    (pdir, _), (ldir, _) = parquet_run, letor_run
    names = json.loads((pdir / "truth.json").read_text())["feature_names"]
    from_parquet = load_dataset(pdir / f"{split}.parquet")
    from_letor = load_dataset(ldir / f"{split}.txt", feature_names=names)
    assert from_parquet.feature_names == names
    np.testing.assert_array_equal(from_parquet.features, from_letor.features)
    np.testing.assert_array_equal(from_parquet.labels, from_letor.labels)
    np.testing.assert_array_equal(from_parquet.group_offsets, from_letor.group_offsets)
    np.testing.assert_array_equal(
        from_parquet.query_ids.astype(np.int64), from_letor.query_ids.astype(np.int64)
    )
    np.testing.assert_array_equal(from_parquet.user_ids, from_letor.user_ids)
    assert from_parquet.positions is not None and from_letor.positions is not None
    np.testing.assert_array_equal(from_parquet.positions, from_letor.positions)
    clicks = np.loadtxt(ldir / f"{split}.txt.click", dtype=np.int64)
    column = pq.read_table(pdir / f"{split}.parquet", columns=["click"]).column(0).to_numpy()
    np.testing.assert_array_equal(clicks, column)


def test_positions_are_a_permutation_of_each_list(
    parquet_run: tuple[Path, SimulationSummary],
) -> None:
    data = load_dataset(parquet_run[0] / "train.parquet")
    assert data.positions is not None
    for q in range(0, data.num_queries, 17):
        start, stop = data.group_offsets[q], data.group_offsets[q + 1]
        np.testing.assert_array_equal(
            np.sort(data.positions[start:stop]), np.arange(1, stop - start + 1)
        )


def test_letor_text_reads_back_as_the_same_float32() -> None:
    values = np.array(
        [[0.0, -0.0, 0.1257, -1.321, 64.0423, 1e-4, -1e-4, 36159.504, 4000.1235, 123456.7]],
        dtype=np.float32,
    )
    values = np.round(values, 4).astype(np.float32)
    line = format_letor(np.array([3]), np.array([12]), values).decode()
    assert line.startswith("3 qid:12 1:0 2:0 3:0.1257 4:-1.321 5:64.0423 6:0.0001 7:-0.0001 ")
    assert line.endswith("\n") and line.count("\n") == 1
    parsed = np.array([float(t.split(":")[1]) for t in line.split()[2:]], dtype=np.float32)
    np.testing.assert_array_equal(parsed, values[0])
