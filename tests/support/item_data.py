"""Synthetic ranking data whose relevance depends on candidate, query and item features, with
an item table joined by `doc_id` (for the feature-source tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ITEM_NAMES = ["price", "ctr", "popularity"]
CANDIDATE_NAMES = ["bm25", "title_match"]
QUERY_NAMES = ["query_length"]


def write_sourced_data(
    directory: Path, n_queries: int = 80, per_query: int = 10, n_items: int = 300, seed: int = 0
) -> tuple[Path, Path, Path]:
    """(train.parquet, valid.parquet, items.parquet); a tenth of the documents have no row in
    the item table, so their item features are missing in training as in serving."""
    rng = np.random.default_rng(seed)
    ids = np.asarray([f"item-{i}" for i in range(n_items)])
    items = rng.normal(0, 1, (n_items, len(ITEM_NAMES))).round(3).astype(np.float32)
    known = rng.random(n_items) >= 0.1
    directory.mkdir(parents=True, exist_ok=True)
    item_path = directory / "items.parquet"
    table = {"doc_id": ids[known], **{n: items[known, j] for j, n in enumerate(ITEM_NAMES)}}
    pq.write_table(pa.table(table), item_path)
    paths = []
    for part, offset in (("train", 0), ("valid", 1000)):
        rows = n_queries * per_query
        doc = rng.integers(0, n_items, rows)
        cand = rng.normal(0, 1, (rows, len(CANDIDATE_NAMES))).round(3).astype(np.float32)
        qlen = np.repeat(rng.integers(1, 6, n_queries), per_query).astype(np.float32)
        item_part = np.where(known[doc], items[doc, 0] - 0.5 * items[doc, 1], 0.0)
        signal = cand[:, 0] + item_part + 0.2 * qlen * cand[:, 1]
        label = np.clip(np.round(signal + rng.normal(0, 0.3, rows)) + 1, 0, 4)
        columns = {
            "qid": np.repeat(np.arange(n_queries) + offset, per_query),
            "label": label,
            "doc_id": ids[doc],
            **{n: cand[:, j] for j, n in enumerate(CANDIDATE_NAMES)},
            "query_length": qlen,
        }
        path = directory / f"{part}.parquet"
        pq.write_table(pa.table(columns), path)
        paths.append(path)
    return paths[0], paths[1], item_path
