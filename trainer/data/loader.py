"""One entry point for every data file, and column alignment to a model's feature names."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError

PARQUET_SUFFIXES = (".parquet", ".pq")
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

    `feature_names` (a model's) lines the columns up with the model: by name for Parquet, by
    position for LETOR text, whose columns are feature ids 1..n. `num_features` forces the
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

        width = len(feature_names) if feature_names is not None else num_features
        dataset = read_letor(path, num_features=width)
    return dataset if feature_names is None else align_features(dataset, feature_names)


def align_features(dataset: RankingDataset, feature_names: list[str]) -> RankingDataset:
    """The dataset with exactly the columns `feature_names`, in that order.

    Named data (Parquet) is matched by name; extra columns are dropped, missing ones are an
    error. Unnamed data (LETOR) is positional: missing trailing ids are absent, hence 0.0 as in
    SVMlight; more columns than the model has is an error.
    """
    names = list(feature_names)
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
