from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from trainer.simulate import SimulationConfig, SimulationSummary, simulate
from trainer.simulate.generator import World, generate_chunks


def _bytes_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("fmt", ["letor", "parquet"])
def test_same_seed_gives_identical_bytes(tmp_path: Path, fmt: str) -> None:
    config = SimulationConfig(rows=3_000, users=100, seed=3, format=fmt, clicks=True)
    simulate(config, tmp_path / "a")
    simulate(config, tmp_path / "b")
    first, second = _bytes_of(tmp_path / "a"), _bytes_of(tmp_path / "b")
    assert first.keys() == second.keys()
    assert all(first[name] == second[name] for name in first)
    simulate(config.model_copy(update={"seed": 4}), tmp_path / "c")
    third = _bytes_of(tmp_path / "c")
    assert (
        third["train" + (".txt" if fmt == "letor" else ".parquet")]
        != first["train" + (".txt" if fmt == "letor" else ".parquet")]
    )


def test_written_files(parquet_run: tuple[Path, SimulationSummary]) -> None:
    out, summary = parquet_run
    names = {p.name for p in out.iterdir()}
    assert names == {
        "train.parquet",
        "vali.parquet",
        "test.parquet",
        "users.parquet",
        "truth.json",
        "cluster_scheme.toml",
    }
    columns = pq.read_schema(out / "train.parquet").names
    truth = json.loads((out / "truth.json").read_text())
    assert columns == ["qid", "label", "user_id", "position", "click", *truth["feature_names"]]
    assert len(truth["feature_names"]) == 20
    assert truth["splits"] == {k: v.model_dump() for k, v in summary.splits.items()}
    users = pq.read_table(out / "users.parquet").column_names
    assert users == [
        "user_id",
        "country",
        "age",
        "price_level",
        "device",
        "trips_per_year",
        "true_type",
    ]


@pytest.mark.parametrize("rows", [1, 37, 1_000, 12_345])
def test_row_count_is_exact_and_queries_are_whole(rows: int) -> None:
    config = SimulationConfig(rows=rows, users=50, docs_per_query=(5, 30), chunk_queries=64)
    chunks = list(generate_chunks(World.build(config)))
    sizes = np.concatenate([np.diff(c.docs.offsets) for c in chunks])
    qids = np.concatenate([c.qids for c in chunks])
    assert sizes.sum() == rows
    assert sizes.min() >= 1 and sizes.max() <= 30
    assert np.all(sizes[:-1] >= 5)  # only the last list is cut to hit `rows` exactly
    np.testing.assert_array_equal(qids, np.arange(1, qids.size + 1))


def test_splits_partition_queries(parquet_run: tuple[Path, SimulationSummary]) -> None:
    out, summary = parquet_run
    qids = [
        np.unique(pq.read_table(out / s.file, columns=["qid"]).column("qid").to_numpy())
        for s in summary.splits.values()
    ]
    every = np.concatenate(qids)
    assert every.size == np.unique(every).size == summary.queries
    shares = np.array([q.size for q in qids]) / summary.queries
    np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.05)
    assert sum(s.rows for s in summary.splits.values()) == summary.rows == 20_000


def test_labels_are_grades_with_the_target_shares(
    parquet_run: tuple[Path, SimulationSummary],
) -> None:
    out, summary = parquet_run
    labels = pq.read_table(out / "train.parquet", columns=["label"]).column("label").to_numpy()
    assert labels.min() >= 0 and labels.max() <= 4
    shares = np.asarray(summary.label_counts) / summary.rows
    np.testing.assert_allclose(shares, [0.45, 0.27, 0.15, 0.09, 0.04], atol=0.03)


def test_every_query_user_has_a_profile(parquet_run: tuple[Path, SimulationSummary]) -> None:
    out, _ = parquet_run
    users = set(pq.read_table(out / "users.parquet").column("user_id").to_pylist())
    served = set(pq.read_table(out / "train.parquet", columns=["user_id"]).column(0).to_pylist())
    assert served <= users and len(served) > 100


def test_progress_reaches_the_total(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    config = SimulationConfig(rows=5_000, users=20, chunk_queries=16)
    simulate(config, tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) > 3
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1] == (5_000, 5_000)
