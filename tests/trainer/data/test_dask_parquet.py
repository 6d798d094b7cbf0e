"""Parquet files read by real Dask worker processes: partitions of whole queries, clear errors
naming the file for data the cluster engine must refuse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.data.dask_parquet import ClusterDataset, open_cluster_dataset
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.data.loader import load_dataset
from trainer.data.parquet import write_parquet
from trainer.data.parquet_files import list_parquet_files, write_query_contiguous

DEMO = Path(__file__).resolve().parents[3] / "trainer" / "demo_data"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo() -> RankingDataset:
    return load_dataset(DEMO / "rank.test")


@pytest.fixture
def client(dask_cluster) -> Iterator:
    from distributed import Client

    with Client(dask_cluster.address, timeout=30) as client:
        yield client


def _local_sizes(data: ClusterDataset) -> np.ndarray:
    return data.query_sizes.compute().to_numpy()


def test_partitions_hold_whole_queries(client, demo: RankingDataset, tmp_path: Path) -> None:
    write_query_contiguous(demo, tmp_path / "train", files=3)
    data = open_cluster_dataset(client, str(tmp_path / "train"), partition_rows=100)
    assert data.num_files == 3 and len(data.parts) > 3  # files were cut at query starts
    assert (data.num_docs, data.num_queries) == (demo.num_docs, demo.num_queries)
    assert data.max_query_size == int(demo.group_sizes.max())
    np.testing.assert_array_equal(_local_sizes(data), demo.group_sizes)
    rows = data.features.map_partitions(len).compute().to_numpy()
    sizes = data.query_sizes.map_partitions(lambda s: s.sum()).compute().to_numpy()
    np.testing.assert_array_equal(rows, sizes)  # every partition: whole queries only
    np.testing.assert_array_equal(data.features.compute().to_numpy(), demo.features)
    again = open_cluster_dataset(client, str(tmp_path / "train"), partition_rows=100)
    assert again.fingerprint == data.fingerprint
    data.release()
    again.release()


def test_a_glob_selects_files(tmp_path: Path, demo: RankingDataset) -> None:
    write_query_contiguous(demo, tmp_path, files=3)
    (tmp_path / "_SUCCESS").write_text("")
    assert len(list_parquet_files(str(tmp_path / "part-0000[01].parquet"))) == 2
    assert len(list_parquet_files(str(tmp_path))) == 3
    with pytest.raises(DataFormatError, match="no Parquet files"):
        list_parquet_files(str(tmp_path / "*.csv"))


def test_a_query_split_across_files_names_both(
    client, demo: RankingDataset, tmp_path: Path
) -> None:
    a, b = demo.subset_queries(np.arange(0, 20)), demo.subset_queries(np.arange(19, 40))
    write_parquet(a, tmp_path / "a.parquet")
    write_parquet(b, tmp_path / "b.parquet")
    with pytest.raises(
        DataFormatError, match=r"b\.parquet: qid .* continues a query of .*a\.parquet"
    ):
        open_cluster_dataset(client, str(tmp_path))


def test_a_query_in_two_distant_files_names_them(
    client, demo: RankingDataset, tmp_path: Path
) -> None:
    write_parquet(demo.subset_queries(np.arange(0, 10)), tmp_path / "a.parquet")
    write_parquet(demo.subset_queries(np.arange(10, 20)), tmp_path / "b.parquet")
    write_parquet(demo.subset_queries(np.array([25, 26, 3])), tmp_path / "c.parquet")
    qid = demo.query_ids[3]
    with pytest.raises(DataFormatError, match=rf"qid {qid} also appears in .*a\.parquet"):
        open_cluster_dataset(client, str(tmp_path))


def test_a_query_not_contiguous_in_a_file_names_file_and_row(
    client, demo: RankingDataset, tmp_path: Path
) -> None:
    write_parquet(demo.subset_queries(np.array([0, 1, 0])), tmp_path / "bad.parquet")
    with pytest.raises(
        DataFormatError, match=r"bad\.parquet: row \d+, column 'qid': qid .* reappears"
    ):
        open_cluster_dataset(client, str(tmp_path))


def test_missing_columns_name_the_file(client, demo: RankingDataset, tmp_path: Path) -> None:
    write_query_contiguous(demo, tmp_path / "train", files=2)
    valid = tmp_path / "valid" / "v.parquet"
    valid.parent.mkdir()
    table = pq.read_table(tmp_path / "train" / "part-00000.parquet").drop_columns(["f3"])
    pq.write_table(table, valid)
    names = [f"f{i + 1}" for i in range(demo.num_features)]
    with pytest.raises(DataFormatError, match=r"v\.parquet: missing feature columns: f3"):
        open_cluster_dataset(client, str(valid.parent), names)
    pq.write_table(table.drop_columns(["label"]), valid)
    with pytest.raises(DataFormatError, match=r"v\.parquet: no 'label' column"):
        open_cluster_dataset(client, str(valid.parent))


def test_a_bad_label_names_file_and_row(client, tmp_path: Path) -> None:
    labels = pa.array([1.0, None, 0.0])
    table = pa.table({"qid": [1, 1, 2], "label": labels, "f1": [0.1, 0.2, 0.3]})
    pq.write_table(table, tmp_path / "x.parquet")
    with pytest.raises(DataFormatError, match=r"x\.parquet: row 2, column 'label'"):
        open_cluster_dataset(client, str(tmp_path))


def test_a_negative_label_names_file_and_row(client, tmp_path: Path) -> None:
    table = pa.table({"qid": [1, 1, 2], "label": [1.0, 0.0, -1.0], "f1": [0.1, 0.2, 0.3]})
    pq.write_table(table, tmp_path / "x.parquet")
    with pytest.raises(DataFormatError, match=r"x\.parquet: row 3, column 'label': -1 is neg"):
        open_cluster_dataset(client, str(tmp_path))


def test_no_data_is_a_clear_error(client, tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="no such file or directory"):
        open_cluster_dataset(client, str(tmp_path / "nothing-here"))
