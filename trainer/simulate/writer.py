"""Streaming writers of one split (LETOR text or Parquet), the user table and `truth.json`.

File conventions (read back by `trainer.data.loader.load_dataset`):
- LETOR: `<split>.txt` with `label qid:N 1:v ...` lines, plus side files: `<split>.txt.user`
  (one user id per query, in file order) and, with clicks, `<split>.txt.position` (1-based
  served position per document line) and `<split>.txt.click` (0/1 per document line).
- Parquet: `<split>.parquet` with columns qid, label, user_id, [position, click], then one
  float32 column per feature; written one row group at a time.
Labels are always the true relevance grades; clicks are a separate column or side file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from trainer.simulate.letor_text import format_column, format_letor
from trainer.simulate.users import Users

PARQUET_COMPRESSION = "zstd"
DISCRETE_FEATURES = ("title_match", "category")


@dataclass(frozen=True)
class SplitBatch:
    """Consecutive whole queries bound for one split; query j owns rows offsets[j]:offsets[j+1]."""

    qids: np.ndarray  # int64 [n_queries]
    offsets: np.ndarray  # int64 [n_queries + 1]
    user_ids: np.ndarray  # str [n_queries]
    labels: np.ndarray  # int64 [n_docs]
    features: np.ndarray  # float32 [n_docs, n_features]
    positions: np.ndarray | None  # int64 [n_docs]
    clicks: np.ndarray | None  # int8 [n_docs]

    @property
    def num_docs(self) -> int:
        return int(self.labels.size)

    def row_qids(self) -> np.ndarray:
        return np.repeat(self.qids, np.diff(self.offsets))


class LetorSplitWriter:
    """`<split>.txt` plus its `.user` (and with clicks `.position`, `.click`) side files."""

    def __init__(self, path: Path, clicks: bool) -> None:
        self.path = path
        names = [path, Path(f"{path}.user")]
        if clicks:
            names += [Path(f"{path}.position"), Path(f"{path}.click")]
        self._files: list[BinaryIO] = [name.open("wb") for name in names]

    def write(self, batch: SplitBatch) -> None:
        text, users, *clicks = self._files
        text.write(format_letor(batch.labels, batch.row_qids(), batch.features))
        users.write(("\n".join(batch.user_ids.tolist()) + "\n").encode())
        if clicks:
            assert batch.positions is not None and batch.clicks is not None
            clicks[0].write(format_column(batch.positions))
            clicks[1].write(format_column(batch.clicks))

    def close(self) -> None:
        for handle in self._files:
            handle.close()


class ParquetSplitWriter:
    """`<split>.parquet`, buffered into row groups of about `row_group_rows` rows."""

    def __init__(
        self, path: Path, feature_names: list[str], clicks: bool, row_group_rows: int
    ) -> None:
        self.path = path
        fields = [
            pa.field("qid", pa.int64()),
            pa.field("label", pa.int32()),
            pa.field("user_id", pa.string()),
        ]
        if clicks:
            fields += [pa.field("position", pa.int32()), pa.field("click", pa.int8())]
        fields += [pa.field(name, pa.float32()) for name in feature_names]
        self._schema = pa.schema(fields)
        # Dictionary pages only where values repeat; byte-stream-split for the continuous floats
        # (four times faster to write than trying a dictionary on every column, about as small).
        small = ["user_id", "label", "position", "click", *DISCRETE_FEATURES]
        self._writer = pq.ParquetWriter(
            path,
            self._schema,
            compression=PARQUET_COMPRESSION,
            use_dictionary=[name for name in small if name in self._schema.names],
            use_byte_stream_split=[n for n in feature_names if n not in DISCRETE_FEATURES],
        )
        self._row_group_rows = row_group_rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def write(self, batch: SplitBatch) -> None:
        sizes = np.diff(batch.offsets)
        columns: list[Any] = [
            pa.array(batch.row_qids()),
            pa.array(batch.labels.astype(np.int32)),
            pa.array(batch.user_ids).take(pa.array(np.repeat(np.arange(sizes.size), sizes))),
        ]
        if batch.positions is not None and batch.clicks is not None:
            columns += [pa.array(batch.positions.astype(np.int32)), pa.array(batch.clicks)]
        by_column = np.ascontiguousarray(batch.features.T)  # one transpose, zero-copy columns
        columns += [pa.array(column) for column in by_column]
        self._pending.append(pa.RecordBatch.from_arrays(columns, schema=self._schema))
        self._pending_rows += batch.num_docs
        if self._pending_rows >= self._row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if self._pending_rows:
            table = pa.Table.from_batches(self._pending, schema=self._schema)
            self._writer.write_table(table, row_group_size=self._pending_rows)
        self._pending, self._pending_rows = [], 0

    def close(self) -> None:
        self._flush()
        self._writer.close()


def split_file_name(split: str, fmt: str) -> str:
    return f"{split}.txt" if fmt == "letor" else f"{split}.parquet"


def open_split_writer(
    out_dir: Path,
    split: str,
    fmt: str,
    feature_names: list[str],
    clicks: bool,
    row_group_rows: int,
) -> LetorSplitWriter | ParquetSplitWriter:
    path = out_dir / split_file_name(split, fmt)
    if fmt == "letor":
        return LetorSplitWriter(path, clicks)
    return ParquetSplitWriter(path, feature_names, clicks, row_group_rows)


def write_users(users: Users, out_dir: Path, fmt: str) -> Path:
    """`users.parquet` (Parquet runs) or `users.csv` (LETOR runs): user_id, profile fields,
    `true_type` (the latent type, for evaluation only)."""
    table = pa.table(users.columns())
    if fmt == "parquet":
        path = out_dir / "users.parquet"
        pq.write_table(table, path, compression=PARQUET_COMPRESSION)
    else:
        path = out_dir / "users.csv"
        pa_csv.write_csv(
            table, path, pa_csv.WriteOptions(quoting_style="none", quoting_header="none")
        )
    return path


def write_truth(truth: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / "truth.json"
    path.write_text(json.dumps(truth, indent=2) + "\n")
    return path
