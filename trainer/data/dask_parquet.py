"""Ranking data held by a Dask cluster: the client lists Parquet files and plans partitions of
whole queries; the workers survey the files, read them (`dask.dataframe.from_map`) and keep
them. The client holds metadata only: file names, row counts, query boundaries of cuts.

Files must be query-contiguous, as `ltr dataset` and the nightly partitions write them: each
query's rows together in one file. A file is then cut at query starts into partitions of about
`partition_rows` rows, so no shuffle is ever needed. A query found in two files is an error
naming both (merge or rewrite them query-contiguous first).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.data.errors import DataFormatError
from trainer.data.parquet_files import (
    FileSurvey,
    feature_columns,
    list_parquet_files,
    read_rows,
    survey_file,
)

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client

PARTITION_ROWS = 262_144  # about 140 MB of float32 at 136 features
# "null": a column whose every value is None (all missing), as trainer.data.parquet reads it
NUMERIC_TYPES = ("int", "uint", "float", "double", "halffloat", "bool", "decimal", "null")


@dataclass(frozen=True)
class ClusterDataset:
    """One data set persisted on the workers, partition i of each collection aligned."""

    location: str
    feature_names: list[str]
    parts: list[tuple[str, int, int]]  # (file URL, first row, end row) per partition
    features: dd.DataFrame  # float32 [n_docs, n_features]
    labels: dd.Series  # float64 [n_docs]
    query_sizes: dd.Series  # int64 [n_queries], documents per query, partition by partition
    query_ids: dd.Series  # str [n_queries], aligned with query_sizes
    num_docs: int
    num_queries: int
    max_query_size: int
    fingerprint: str  # sha256 (16 hex digits) of every partition's features, labels, sizes

    @property
    def num_files(self) -> int:
        return len({url for url, _, _ in self.parts})

    def release(self) -> None:
        """Let the workers drop the data (the futures go with these collections)."""
        from distributed import futures_of

        for future in futures_of([self.features, self.labels, self.query_sizes, self.query_ids]):
            future.release()


def open_cluster_dataset(
    client: Client,
    location: str,
    feature_names: list[str] | None = None,
    partition_rows: int = PARTITION_ROWS,
    files: list[str] | None = None,
    whole_labels: bool = False,
) -> ClusterDataset:
    """Survey, plan and read `location` (a Parquet file, directory or glob; a path or fsspec
    URL) on the cluster, or the given `files` (URLs; `location` then only names them).
    `feature_names` (the training set's) lines validation data up by name. `whole_labels`:
    a fractional label is an error (data LightGBM trains on).

    Raises DataFormatError naming the file (and row) for anything wrong with the data.
    """
    if files is None:
        # Listed by a worker: the data need only be reachable from the workers.
        files = client.submit(list_parquet_files, location, pure=False).result()
    assert files is not None
    # A worker's exception (DataFormatError naming the file) is raised here as itself.
    rows = [partition_rows] * len(files)
    surveys: list[FileSurvey] = client.gather(client.map(survey_file, files, rows, pure=False))
    names = feature_names if feature_names is not None else _feature_names(surveys)
    _check_columns(surveys, names)
    _check_file_boundaries(surveys)
    parts = [(s.url, a, b) for s in surveys for a, b in zip(s.cuts[:-1], s.cuts[1:], strict=True)]
    features, labels, query_sizes, query_ids = _read(client, parts, names, whole_labels)
    _check_queries_unique(client, query_ids, parts)
    digests = client.gather(client.compute(_partition_digests(features, labels, query_sizes)))
    return ClusterDataset(
        location=location,
        feature_names=names,
        parts=parts,
        features=features,
        labels=labels,
        query_sizes=query_sizes,
        query_ids=query_ids,
        num_docs=sum(s.num_rows for s in surveys),
        num_queries=sum(s.num_queries for s in surveys),
        max_query_size=max(s.max_query_size for s in surveys),
        fingerprint=hashlib.sha256("".join(digests).encode()).hexdigest()[:16],
    )


def _futures(collection: Any) -> list[Any]:
    from distributed import futures_of

    return list(futures_of(collection))


def _feature_names(surveys: list[FileSurvey]) -> list[str]:
    names = feature_columns(surveys[0].columns)
    if not names:
        raise DataFormatError(f"{surveys[0].url}: no feature columns")
    return names


def _check_columns(surveys: list[FileSurvey], names: list[str]) -> None:
    """Every file has every feature, numeric; training files have no extra feature column."""
    first = surveys[0]
    for survey in surveys:
        missing = [name for name in names if name not in survey.columns]
        if missing:
            shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise DataFormatError(f"{survey.url}: missing feature columns: {shown}")
        for name in ("label", *names):
            kind = survey.columns[name]
            if not kind.startswith(NUMERIC_TYPES):
                raise DataFormatError(
                    f"{survey.url}: column {name!r}: has type {kind}, expected a number"
                )
        extra = [n for n in feature_columns(survey.columns) if n not in names]
        if extra and feature_columns(first.columns) == names:
            shown = ", ".join(extra[:10])
            raise DataFormatError(
                f"{survey.url}: feature columns {shown} are not in {first.url}; every file "
                "of a data set must have the same feature columns"
            )


def _check_file_boundaries(surveys: list[FileSurvey]) -> None:
    for before, after in itertools.pairwise(surveys):
        if str(before.last_qid) == str(after.first_qid):
            raise DataFormatError(
                f"{after.url}: qid {after.first_qid} continues a query of {before.url}; "
                "each query must lie whole in one file (rewrite the files query-contiguous, "
                "e.g. with `ltr dataset`)"
            )


def _read(
    client: Client, parts: list[tuple[str, int, int]], names: list[str], whole_labels: bool
) -> tuple[dd.DataFrame, dd.Series, dd.Series, dd.Series]:
    """Features, labels, query sizes and query ids, read and persisted by the workers."""
    import dask.dataframe as dd
    import pandas as pd

    meta = pd.DataFrame(
        {
            "qid": pd.Series([], dtype="str"),
            "label": pd.Series([], dtype=np.float64),
            **{name: pd.Series([], dtype=np.float32) for name in names},
        }
    )
    frame = dd.from_map(
        read_rows,
        parts,
        feature_names=names,
        whole_labels=whole_labels,
        meta=meta,
        label="read-parquet",
    )
    features, labels = frame[names], frame["label"]
    index_meta = pd.DataFrame({"qid": pd.Series([], dtype="str"), "size": np.array([], np.int64)})
    queries = frame["qid"].map_partitions(_query_index, meta=index_meta)
    persisted = client.persist([features, labels, queries["size"], queries["qid"]])
    _raise_first_error(client, persisted)
    return persisted[0], persisted[1], persisted[2], persisted[3]


def _raise_first_error(client: Client, collections: list[Any]) -> None:
    from distributed import wait

    futures = _futures(collections)
    wait(futures)
    for future in futures:
        if future.status == "error":
            exc = future.exception()  # the worker's exception, e.g. DataFormatError
            for other in futures:
                other.release()
            raise exc


def _query_index(qids: pd.Series) -> pd.DataFrame:
    """One row per query of a partition: its id and its number of documents."""
    import pandas as pd

    values = qids.to_numpy()
    starts = np.concatenate([[0], np.flatnonzero(values[1:] != values[:-1]) + 1]).astype(np.int64)
    sizes = np.diff(np.concatenate([starts, [values.size]])).astype(np.int64)
    return pd.DataFrame({"qid": qids.iloc[starts].to_numpy(), "size": sizes})


def _check_queries_unique(
    client: Client, query_ids: dd.Series, parts: list[tuple[str, int, int]]
) -> None:
    """A qid in two partitions means a query was split between files (or reappears later in
    one, which the survey already refused): find it on the cluster, name the files."""
    counts = query_ids.value_counts(split_out=1)
    repeated = client.compute(counts[counts > 1]).result().head(1)
    if repeated.empty:
        return
    qid = repeated.index[0]
    holders = client.gather(
        client.compute([_delayed_contains(p, qid) for p in query_ids.to_delayed()])
    )
    files = sorted({parts[i][0] for i, found in enumerate(holders) if found})
    raise DataFormatError(
        f"{files[-1]}: qid {qid} also appears in {', '.join(files[:-1])}; each query must lie "
        "whole in one file (rewrite the files query-contiguous, e.g. with `ltr dataset`)"
    )


def _delayed_contains(part: Any, qid: str) -> Any:
    from dask.delayed import delayed

    return delayed(_contains)(part, qid)


def _contains(qids: pd.Series, qid: str) -> bool:
    return bool((qids == qid).any())


def _partition_digests(features: dd.DataFrame, labels: dd.Series, sizes: dd.Series) -> list[Any]:
    from dask.delayed import delayed

    blocks = zip(features.to_delayed(), labels.to_delayed(), sizes.to_delayed(), strict=True)
    return [delayed(_digest)(x, y, q) for x, y, q in blocks]


def _digest(features: pd.DataFrame, labels: pd.Series, sizes: pd.Series) -> str:
    digest = hashlib.sha256()
    for array in (features.to_numpy(np.float32), labels.to_numpy(), sizes.to_numpy()):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()
