"""Parquet ranking files anywhere fsspec reaches (local paths, `s3://`, `gs://`, `hdfs://`):
listing them, surveying one file's query layout, and reading a row range of whole queries.

`survey_file` and `read_rows` run on Dask workers: they open the file themselves, so the data
never passes through the process that planned the work. Columns are as `trainer.data.parquet`
reads them (`qid`, `label`, optional `user_id`, `position`, `click`; every other column a numeric
feature). Rows in error messages are 1-based rows of the file.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.errors import (
    DataFormatError,
    first_bad_label,
    first_fractional_label,
    located,
)
from trainer.data.float32 import BEYOND_FLOAT32, to_float32
from trainer.data.parquet import RESERVED, is_numeric

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.parquet as pq

PARQUET_SUFFIXES = (".parquet", ".pq")
GLOB_CHARS = frozenset("*?[")


def list_parquet_files(location: str) -> list[str]:
    """Every Parquet file of `location` (a file, a directory searched recursively, or a glob;
    a local path or an fsspec URL), as URLs a worker can open, sorted by path."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as exc:
        raise DataFormatError(f"{location}: cannot open this location ({exc})") from None
    try:
        if GLOB_CHARS & set(root):
            found = [p for p in fs.glob(root) if fs.isfile(p)]
        elif fs.isdir(root):
            found = [p for p in fs.find(root) if not _hidden(p, root)]
        elif fs.isfile(root):
            found = [root]
        else:
            raise DataFormatError(f"{location}: no such file or directory")
    except OSError as exc:
        raise DataFormatError(f"{location}: cannot list ({exc})") from None
    files = sorted(p for p in found if p.lower().endswith(PARQUET_SUFFIXES))
    if not files:
        raise DataFormatError(f"{location}: no Parquet files (*.parquet, *.pq)")
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return files  # plain paths: what the user typed, and what error messages show
    return [fs.unstrip_protocol(p) for p in files]


def _hidden(path: str, root: str) -> bool:
    """Spark's `_SUCCESS`, `.crc` files and the like sit beside partitions: skip them."""
    relative = path[len(root) :].lstrip("/")
    return any(part.startswith((".", "_")) for part in relative.split("/"))


@dataclass(frozen=True)
class FileSurvey:
    """What one file holds, learnt from its footer and its `qid` column only."""

    url: str
    columns: dict[str, str]  # name -> Arrow type, in file order
    num_rows: int
    num_queries: int
    max_query_size: int
    first_qid: Any
    last_qid: Any
    cuts: tuple[int, ...]  # 0, query-start rows about `partition_rows` apart, num_rows


def _open(url: str) -> pq.ParquetFile:
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        fs, path = fsspec.core.url_to_fs(url)
        return pq.ParquetFile(fs.open(path, "rb"))
    except FileNotFoundError:
        raise located(url, None, "no such file (as seen from the Dask worker)") from None
    except (pa.ArrowException, OSError) as exc:
        raise located(url, None, f"not a readable Parquet file ({exc})") from None


def survey_file(url: str, partition_rows: int) -> FileSurvey:
    """Check that `url` is a ranking file whose queries are contiguous, and find where it can be
    cut into partitions of about `partition_rows` rows without splitting a query."""
    from trainer.data.parquet import query_runs, row_label_columns

    parquet = _open(url)
    schema = parquet.schema_arrow
    row_labels = row_label_columns(schema)
    names = list(schema.names)
    if len(set(names)) != len(names):
        raise located(url, None, "duplicate column names")
    for required in ("qid", "label"):
        if required not in names:
            raise located(url, None, f"no {required!r} column (columns: {', '.join(names)})")
    num_rows = parquet.metadata.num_rows
    if num_rows == 0:
        raise located(url, None, "no data rows")
    qid_column = parquet.read(columns=["qid"]).column("qid")
    if qid_column.null_count:
        row = int(np.flatnonzero(qid_column.is_null().to_numpy(zero_copy_only=False))[0]) + 1
        raise located(url, None, f"row {row}, column 'qid': null")
    qids = np.asarray(qid_column.to_numpy(zero_copy_only=False))
    offsets, query_ids = query_runs(url, qids)
    step = max(1, partition_rows)
    targets = np.arange(step, num_rows, step)
    inner = offsets[np.searchsorted(offsets, targets)]
    cuts = np.unique(np.concatenate([[0], inner, [num_rows]]))
    return FileSurvey(
        url=url,
        columns={f.name: str(f.type) for f in schema if f.name not in row_labels},
        num_rows=num_rows,
        num_queries=int(query_ids.size),
        max_query_size=int(np.diff(offsets).max()),
        first_qid=query_ids[0].item(),
        last_qid=query_ids[-1].item(),
        cuts=tuple(int(c) for c in cuts),
    )


def read_rows(
    part: tuple[str, int, int], feature_names: list[str], whole_labels: bool = False
) -> pd.DataFrame:
    """Rows `start:stop` (0-based) of a file as a DataFrame: `qid`, `label` (float64), then
    `feature_names` as float32 (NaN where missing). The range must hold whole queries.
    `whole_labels`: a fractional label is an error (LightGBM's lambdarank trains on these)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    url, start, stop = part
    parquet = _open(url)
    names = set(parquet.schema_arrow.names)
    missing = [name for name in feature_names if name not in names]
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise located(url, None, f"missing feature columns: {shown}")
    groups, first_row = _row_groups(parquet, start, stop)
    table = parquet.read_row_groups(groups, columns=["qid", "label", *feature_names])
    table = table.slice(start - first_row, stop - start)

    def numeric(name: str) -> np.ndarray:
        column = table.column(name)
        kind = column.type
        if not is_numeric(kind):
            raise located(url, None, f"column {name!r}: has type {kind}, expected a number")
        cast = pc.cast(column, pa.float64(), safe=False).fill_null(np.nan)
        return np.asarray(cast.to_numpy(), dtype=np.float64)

    labels = numeric("label")
    bad = ~np.isfinite(labels)
    if bad.any():
        row = start + int(np.flatnonzero(bad)[0]) + 1
        raise located(url, None, f"row {row}, column 'label': missing or not a finite number")
    bad_label = first_bad_label(labels)
    if bad_label is not None:
        row = start + bad_label[0] + 1
        raise located(url, None, f"row {row}, column 'label': {bad_label[1]}")
    # Checked here, on the worker that reads the rows: LightGBM on the workers refused them
    # with a message naming no file (a held-out trial).
    fractional = first_fractional_label(labels, "lightgbm-dask") if whole_labels else None
    if fractional is not None:
        raise located(
            url, None, f"row {start + fractional[0] + 1}, column 'label': {fractional[1]}"
        )
    # qids as strings: one dtype whatever each file stores, for the cross-file duplicate check.
    qids = pc.cast(table.column("qid"), pa.string()).to_pandas()
    columns: dict[str, Any] = {"qid": qids.to_numpy(), "label": labels}
    for name in feature_names:
        wide = numeric(name)
        columns[name], overflow = to_float32(wide)
        if overflow.any():
            index = int(np.flatnonzero(overflow)[0])
            what = f"{wide[index]:g} {BEYOND_FLOAT32}"
            raise located(url, None, f"row {start + index + 1}, column {name!r}: {what}")
    frame = pd.DataFrame(columns, copy=False)
    frame["qid"] = frame["qid"].astype("str")
    return frame


def _row_groups(parquet: pq.ParquetFile, start: int, stop: int) -> tuple[list[int], int]:
    """The row groups covering rows start:stop, and the file row the first of them begins at."""
    sizes = [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    first = int(np.searchsorted(bounds, start, side="right")) - 1
    last = int(np.searchsorted(bounds, stop, side="left"))
    return list(range(first, last)), int(bounds[first])


def feature_columns(columns: dict[str, str]) -> list[str]:
    """The feature columns of a surveyed file, in file order."""
    return [name for name in columns if name not in RESERVED]


def write_query_contiguous(dataset: RankingDataset, directory: Path, files: int) -> list[Path]:
    """Write `dataset` as `files` Parquet files of about equal rows, each holding whole queries
    (the layout `open_cluster_dataset` reads without a shuffle)."""
    from trainer.data.parquet import write_parquet

    directory.mkdir(parents=True, exist_ok=True)
    targets = np.linspace(0, dataset.num_docs, max(1, files) + 1)[1:-1]
    cuts = np.searchsorted(dataset.group_offsets, targets)
    bounds = np.unique(np.concatenate([[0], cuts, [dataset.num_queries]]))
    paths = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        path = directory / f"part-{i:05d}.parquet"
        write_parquet(dataset.subset_queries(np.arange(a, b)), path)
        paths.append(path)
    return paths
