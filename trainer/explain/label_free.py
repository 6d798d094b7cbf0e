"""A data file as the rows a model version scores, for explanations, which read no labels.

The Parquet reader demands a valid `label` column (training and evaluation need one), so a file
without one (unjudged traffic, the usual thing to explain) or with labels that are not grades
is read through a temporary copy whose labels are 0. Errors still name the file given.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from app.artifacts.store import Artifact
from trainer.data.errors import DataFormatError, first_bad_label
from trainer.data.loader import PARQUET_SUFFIXES
from trainer.data.model_rows import ModelRows, load_model_rows


@dataclass(frozen=True)
class ExplainRows:
    rows: ModelRows
    labelled: bool  # the data's labels are the file's own (else placeholders: do not show them)


def load_explain_rows(
    artifact: Artifact, path: Path, items: Path | None = None, items_id_column: str | None = None
) -> ExplainRows:
    """`load_model_rows`, also for a Parquet file whose `label` column is absent or unusable."""
    if has_usable_labels(path):
        rows = load_model_rows(artifact, path, items, items_id_column)
        return ExplainRows(rows, labelled=True)
    with tempfile.TemporaryDirectory(prefix="ltr-explain-") as tmp:
        copy = Path(tmp) / path.name
        _write_with_zero_labels(path, copy)
        try:
            rows = load_model_rows(artifact, copy, items, items_id_column)
        except DataFormatError as exc:
            raise DataFormatError(str(exc).replace(str(copy), str(path))) from None
    data = replace(rows.data, source=str(path))
    return ExplainRows(ModelRows(data, rows.items), labelled=False)


def has_usable_labels(path: Path) -> bool:
    """Whether the reader takes the labels of `path` as it is: False only for a Parquet file
    whose `label` column is absent or not grades. LETOR text (its first field is the label)
    and a file the reader refuses anyway (it then says why) count as usable."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if path.suffix.lower() not in PARQUET_SUFFIXES or not path.is_file():
        return True
    try:
        schema = pq.read_schema(path)
        if schema.names.count("label") != 1:
            return "label" in schema.names  # repeated: the reader refuses the file
        kind = schema.field("label").type
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
        ):
            return False
        column = pq.read_table(path, columns=["label"]).column("label")
    except (pa.ArrowException, OSError):
        return True
    cast = pc.cast(column, pa.float64(), safe=False).fill_null(np.nan)
    labels = np.asarray(cast.to_numpy(), dtype=np.float64)
    return bool(np.all(np.isfinite(labels))) and first_bad_label(labels) is None


def _write_with_zero_labels(path: Path, copy: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataFormatError(f"{path}: not a readable Parquet file ({exc})") from None
    zeros = pa.array(np.zeros(table.num_rows, dtype=np.int64))
    names = table.column_names
    if "label" in names:
        table = table.set_column(names.index("label"), "label", zeros)
    else:
        table = table.append_column("label", zeros)
    pq.write_table(table, copy)
