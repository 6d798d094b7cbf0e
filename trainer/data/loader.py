"""One entry point for every data file, and column alignment to a model's feature names."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError

PARQUET_SUFFIXES = (".parquet", ".pq")
_LETOR_NAME = re.compile(r"f([1-9][0-9]{0,5})")
# Said instead of "no such file", which sends people looking for a path that does exist.
IS_A_DIRECTORY = "is a directory: give a LETOR text file or a Parquet file"


def load_dataset(
    path: str | Path,
    num_features: int | None = None,
    feature_names: list[str] | None = None,
    id_column: str | None = None,
) -> RankingDataset:
    """Read Parquet (`.parquet`, `.pq`) or LETOR text (anything else: `read_letor` then names
    a file that is not LETOR text by its content: gzip, CSV, CR line endings, a Parquet
    file under another name).

    `feature_names` (a model's) lines the columns up with the model: by name for Parquet; for
    LETOR text, whose columns are feature ids 1..n, by id when every name is one LETOR's ids
    are read as (`f1`, `f7`: a model trained on Parquet columns so named, in any order), else
    by position. `num_features` forces the
    width of LETOR text (ignored for Parquet, whose width is its columns). `id_column`: the
    Parquet document id column (for joining item features); LETOR text has none.
    """
    path = Path(path)
    if path.is_dir():
        raise DataFormatError(f"{path}: {IS_A_DIRECTORY}")
    if path.suffix.lower() in PARQUET_SUFFIXES:
        from trainer.data.parquet import read_parquet

        dataset = read_parquet(path, id_column)
    elif id_column is not None:
        raise DataFormatError(
            f"{path}: item features need Parquet data with a {id_column!r} column"
        )
    else:
        from trainer.data.letor import read_letor

        ids = None if feature_names is None else letor_ids(feature_names)
        if ids is not None:
            width: int | None = max(ids)
        else:
            width = len(feature_names) if feature_names is not None else num_features
        dataset = read_letor(path, num_features=width)
    return dataset if feature_names is None else align_features(dataset, feature_names)


def present_id_column(path: Path, id_column: str | None = None) -> str | None:
    """`id_column` (else doc_id, the --id-column default) when the Parquet file `path` has
    such a column: read as ids, never a feature (a numeric doc_id was learned as one, a text
    one refused, when no item table was joined)."""
    from trainer.features.spec import DEFAULT_ID_COLUMN

    if path.suffix.lower() not in PARQUET_SUFFIXES:
        return None
    name = id_column or DEFAULT_ID_COLUMN
    return name if name in parquet_columns(path) else None


def parquet_columns(path: Path) -> list[str]:
    """The column names of a Parquet file; none when it cannot be read (its reader says why)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (OSError, ValueError, pa.ArrowException):
        return []


def align_features(dataset: RankingDataset, feature_names: list[str]) -> RankingDataset:
    """The dataset with exactly the columns `feature_names`, in that order.

    Named data (Parquet) is matched by name; extra columns are dropped, missing ones are an
    error. Unnamed data (LETOR) is positional: missing trailing ids are absent, hence 0.0 as in
    SVMlight; more columns than the model has is an error.
    """
    names = list(feature_names)
    ids = letor_ids(names) if dataset.feature_names is None else None
    if ids is not None and ids != list(range(1, len(ids) + 1)):
        # A trial: a model trained on Parquet columns f6, f3, f1, ... took LETOR id 1 as f6
        # (NDCG@1 0.51 against 0.96 on the same rows as Parquet), without a word.
        if dataset.num_features > max(ids):
            raise DataFormatError(
                f"{dataset.source}: data has feature id {dataset.num_features}, the model's "
                f"largest is {max(ids)}"
            )
        features = np.zeros((dataset.num_docs, len(names)), dtype=np.float32)
        for j, feature_id in enumerate(ids):
            if feature_id <= dataset.num_features:
                features[:, j] = dataset.features[:, feature_id - 1]
        return replace(dataset, features=features, feature_names=names)
    if dataset.feature_names is None:
        width = dataset.num_features
        if width > len(names):
            raise DataFormatError(
                f"{dataset.source}: data has {width} feature columns, the model {len(names)}"
            )
        features = dataset.features
        if width < len(names):
            features = np.zeros((dataset.num_docs, len(names)), dtype=np.float32)
            features[:, :width] = dataset.features
        return replace(dataset, features=features, feature_names=names)
    index = {name: j for j, name in enumerate(dataset.feature_names)}
    missing = [name for name in names if name not in index]
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise DataFormatError(f"{dataset.source}: missing feature columns: {shown}")
    columns = np.asarray([index[name] for name in names], dtype=np.int64)
    if np.array_equal(columns, np.arange(dataset.num_features)):
        return dataset
    features = np.ascontiguousarray(dataset.features[:, columns])
    return replace(dataset, features=features, feature_names=names)


def letor_ids(names: list[str]) -> list[int] | None:
    """The LETOR feature ids of `names` when each is one (`f1`, `f17`: what LETOR text's
    columns are named), distinct; else None."""
    ids = [int(m.group(1)) if (m := _LETOR_NAME.fullmatch(n)) else 0 for n in names]
    return ids if ids and all(ids) and len(set(ids)) == len(ids) else None
