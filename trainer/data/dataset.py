"""The one in-memory shape of ranking data: documents grouped by query."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class RankingDataset:
    """Query-grouped documents.

    Query q owns rows `group_offsets[q]:group_offsets[q + 1]`; queries are contiguous.
    Missing feature values are NaN.
    """

    features: np.ndarray  # float32 [n_docs, n_features], C-contiguous
    labels: np.ndarray  # float64 [n_docs]
    group_offsets: np.ndarray  # int64 [n_queries + 1], group_offsets[0] == 0
    query_ids: np.ndarray  # [n_queries] (str or int), for reports
    feature_names: list[str] | None = None
    source: str = ""
    # Optional: the user each query list was served to ([n_queries]; Parquet column `user_id`
    # or a `<file>.user` side file), and the position each document was shown at ([n_docs],
    # 1-based; Parquet column `position` or a `<file>.position` side file), for click logs.
    user_ids: np.ndarray | None = None
    positions: np.ndarray | None = None
    # Optional: each document's id ([n_docs], strings), from the Parquet id column named at
    # load time; item feature tables are joined on it.
    doc_ids: np.ndarray | None = None
    # Optional: where each row was read ([n_docs], 1-based): its line of the LETOR text file
    # `source` (source_unit "line") or its row of the Parquet file (source_unit "row"), so a
    # check made after reading (what LightGBM refuses) says where, as the readers do.
    source_rows: np.ndarray | None = None
    source_unit: str = "line"
    # Optional, click logs: the position an explored answer swapped with the first
    # ([n_queries], int64; 0 = not explored; app/api/exploration.py).
    explored: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.features.shape[0]
        if self.features.ndim != 2:
            raise ValueError("features must be 2-D [n_docs, n_features]")
        if self.labels.shape != (n,):
            raise ValueError(f"labels has {self.labels.shape[0]} rows, features {n}")
        off = self.group_offsets
        if off.ndim != 1 or off.size < 1 or off[0] != 0 or off[-1] != n:
            raise ValueError("group_offsets must start at 0 and end at n_docs")
        if np.any(np.diff(off) <= 0):
            raise ValueError("every query must have at least one document")
        if self.query_ids.shape[0] != off.size - 1:
            raise ValueError("one query id per group expected")
        if self.feature_names is not None and len(self.feature_names) != self.features.shape[1]:
            raise ValueError("one feature name per column expected")
        if self.user_ids is not None and self.user_ids.shape[0] != off.size - 1:
            raise ValueError("one user id per query expected")
        if self.positions is not None and self.positions.shape != (n,):
            raise ValueError("one position per document expected")
        if self.doc_ids is not None and self.doc_ids.shape != (n,):
            raise ValueError("one document id per document expected")
        if self.source_rows is not None and self.source_rows.shape != (n,):
            raise ValueError("one source row per document expected")
        if self.explored is not None and self.explored.shape != (off.size - 1,):
            raise ValueError("one explored position per query expected")

    @property
    def num_docs(self) -> int:
        return int(self.features.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def num_queries(self) -> int:
        return int(self.group_offsets.size - 1)

    @property
    def group_sizes(self) -> np.ndarray:
        return np.diff(self.group_offsets)

    def names(self) -> list[str]:
        """Feature names, defaulting to LETOR's 1-based ids as strings."""
        return self.feature_names or [f"f{i + 1}" for i in range(self.num_features)]

    def query_of(self, row: int) -> int:
        """The index of the query holding `row`."""
        return int(np.searchsorted(self.group_offsets, row, side="right")) - 1

    def place(self, row: int, column: str = "label") -> str:
        """Where `row` was read, as the readers' errors say it: `<file>:<line>` (LETOR text),
        `<file>: row <n>, column '<column>'` (Parquet), else `<file>: qid <id>`."""
        if self.source_rows is None:
            return f"{self.source}: qid {self.query_ids[self.query_of(row)]}"
        at = int(self.source_rows[row])
        if self.source_unit == "row":
            return f"{self.source}: row {at}, column {column!r}"
        return f"{self.source}:{at}"

    def with_columns(self, values: np.ndarray, names: list[str]) -> RankingDataset:
        """The dataset with more feature columns appended: values float32 [n_docs, len(names)]."""
        features = np.ascontiguousarray(np.hstack([self.features, values]), dtype=np.float32)
        return replace(self, features=features, feature_names=[*self.names(), *names])

    def subset_queries(self, query_index: np.ndarray) -> RankingDataset:
        """The dataset restricted to the given queries (in the given order)."""
        query_index = np.asarray(query_index, dtype=np.int64)
        rows = query_rows(self.group_offsets, query_index)
        sizes = np.diff(self.group_offsets)[query_index]
        return RankingDataset(
            features=np.ascontiguousarray(self.features[rows]),
            labels=self.labels[rows],
            group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            query_ids=self.query_ids[query_index],
            feature_names=self.feature_names,
            source=self.source,
            user_ids=None if self.user_ids is None else self.user_ids[query_index],
            positions=None if self.positions is None else self.positions[rows],
            doc_ids=None if self.doc_ids is None else self.doc_ids[rows],
            source_rows=None if self.source_rows is None else self.source_rows[rows],
            source_unit=self.source_unit,
            explored=None if self.explored is None else self.explored[query_index],
        )


def query_rows(group_offsets: np.ndarray, query_index: np.ndarray) -> np.ndarray:
    """Row indices int64 [n_rows] of the given queries [k], concatenated in the given order."""
    query_index = np.asarray(query_index, dtype=np.int64)
    starts = group_offsets[query_index]
    sizes = group_offsets[query_index + 1] - starts
    rows = np.repeat(starts - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    return (rows + np.arange(int(sizes.sum()))).astype(np.int64)
