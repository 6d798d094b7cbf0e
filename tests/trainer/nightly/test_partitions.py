"""Partition discovery reads only data, says when a day looks doubled or the held-out day is
tiny, and the held-out partition's columns are checked against training before it starts."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.trainer.nightly.conftest import write_config
from trainer.commands.errors import CommandError
from trainer.data.letor import write_letor
from trainer.data.loader import load_dataset
from trainer.nightly.config import load_config
from trainer.nightly.partitions import find_partitions
from trainer.nightly.run import load_data

DAYS = ("2026-11-21", "2026-11-22", "2026-11-23")


def _parquet(path: Path, columns: list[str], queries: int = 12, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    rows = queries * 5
    table = {"qid": np.repeat(np.arange(queries), 5), "label": rng.integers(0, 3, rows)}
    table |= {c: rng.random(rows).astype(np.float32) for c in columns}
    pq.write_table(pa.table(table), path)


@pytest.mark.parametrize(
    ("holdout", "says"),
    [
        (["f1", "f2"], "lacks f3"),
        (["f1", "f3", "f2"], "another order (column 2: f3, training has f2)"),
        (["f1", "f2", "f3", "f4"], "has f4 that training has not"),
    ],
    ids=["fewer", "reordered", "more"],
)
def test_holdout_columns_must_match_training(tmp_path: Path, holdout: list[str], says: str) -> None:
    root = tmp_path / "data"
    root.mkdir()
    for day in DAYS[:-1]:
        _parquet(root / f"{day}.parquet", ["f1", "f2", "f3"])
    _parquet(root / f"{DAYS[-1]}.parquet", holdout)
    config = load_config(write_config(tmp_path, root))
    with pytest.raises(CommandError, match=f"{DAYS[-1]}.parquet: held-out partition") as info:
        load_data(config)
    assert says in str(info.value)


def test_hidden_and_bookkeeping_paths_are_not_data(partitioned: Path, tmp_path: Path) -> None:
    root = tmp_path / "data"
    day = root / DAYS[0]
    (day / "_temporary" / "0").mkdir(parents=True)
    (day / ".staging").mkdir()
    good = load_dataset(partitioned / "2026-11-19" / "part-0.txt")
    write_letor(good, day / "part-0.txt")
    for junk in (
        day / ".partial-upload.txt",
        day / "_SUCCESS.txt",
        day / "_temporary" / "0" / "part-1.txt",
        day / ".staging" / "part-2.txt",
        root / f"_{DAYS[1]}.txt",
        root / f".{DAYS[1]}.txt",
    ):
        junk.write_text("not ranking data\n")
    (part,) = find_partitions(root, 7)
    assert part.files == [day / "part-0.txt"]


def test_a_day_from_several_entries_warns(
    partitioned: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "data"
    for name in (DAYS[0], f"{DAYS[0]}.bak"):
        (root / name).mkdir(parents=True)
        write_letor(load_dataset(partitioned / "2026-11-19" / "part-0.txt"), root / name / "a.txt")
    with caplog.at_level(logging.WARNING):
        (part,) = find_partitions(root, 7)
    assert len(part.files) == 2  # still read: a day may be split on purpose
    assert f"assembled from 2 entries: {DAYS[0]}, {DAYS[0]}.bak" in caplog.text


def test_a_tiny_holdout_partition_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "data"
    root.mkdir()
    for day in DAYS[:-1]:
        _parquet(root / f"{day}.parquet", ["f1", "f2"], queries=40)
    _parquet(root / f"{DAYS[-1]}.parquet", ["f1", "f2"], queries=2)
    with caplog.at_level(logging.WARNING):
        load_data(load_config(write_config(tmp_path, root)))
    assert "held-out partition has 10 rows, under 10% of the median training" in caplog.text
    assert "partition's 200" in caplog.text


def test_a_doc_id_column_is_not_a_feature(tmp_path: Path) -> None:
    """As `ltr train` reads it: a numeric doc_id was learned as a feature."""
    root = tmp_path / "data"
    root.mkdir()
    for seed, day in enumerate(DAYS):
        path = root / f"{day}.parquet"
        _parquet(path, ["f1", "f2"], seed=seed)
        table = pq.read_table(path)
        pq.write_table(table.append_column("doc_id", pa.array(np.arange(table.num_rows))), path)
    data = load_data(load_config(write_config(tmp_path, root)))
    assert data.train.feature_names == ["f1", "f2"]
    assert data.holdout.feature_names == ["f1", "f2"]
