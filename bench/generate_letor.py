"""Synthetic LETOR data of any size with a learnable relevance signal.

`python -m bench.generate_letor --rows 100000 --features 136 --queries 2000 --out FILE`

Features are in [0, 1) with 4 decimals (about 30% zeros, written sparse, so files look like
MSLR's); relevance is graded 0..4 by each document's rank within its query under a hidden
score that mixes a linear part, a threshold and an interaction, so trees have something to
learn and a random ranking scores visibly worse. The file is written chunk by chunk (bounded
memory); `generate()` returns exactly what the file holds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.letor import write_rows

CHUNK_QUERIES = 256
DECIMALS = 4
ZERO_SHARE = 0.3
# Share of each query's documents at label 4, 3, 2, 1 (the rest are 0), best first.
GRADE_SHARES = (0.05, 0.10, 0.15, 0.25)


def query_sizes(rows: int, queries: int, seed: int) -> np.ndarray:
    """Query list lengths int64 [queries], at least 1 each, summing to `rows`."""
    if not 1 <= queries <= rows:
        raise ValueError(f"need 1 <= queries <= rows, got {queries} queries for {rows} rows")
    rng = np.random.default_rng([seed, 0])
    weights = rng.lognormal(0.0, 0.5, size=queries)
    extra = np.floor((rows - queries) * weights / weights.sum()).astype(np.int64)
    extra[rng.choice(queries, size=rows - queries - int(extra.sum()), replace=False)] += 1
    return extra + 1


def _hidden_weights(features: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1])
    informative = min(features, 20)
    weights = np.zeros(features)
    weights[:informative] = rng.normal(0.0, 1.0, size=informative)
    return weights


def _chunk(
    sizes: np.ndarray, features: int, weights: np.ndarray, seed: int, index: int
) -> tuple[np.ndarray, np.ndarray]:
    """(features float32 [n, f], labels float64 [n]) for one chunk of queries."""
    rng = np.random.default_rng([seed, 2, index])
    n = int(sizes.sum())
    x = np.round(rng.random((n, features)), DECIMALS)
    x[rng.random((n, features)) < ZERO_SHARE] = 0.0
    hidden = x @ weights + rng.normal(0.0, 0.3, size=n)
    if features >= 3:
        hidden += 1.5 * (x[:, 0] > 0.5) * x[:, 1] - 1.0 * (x[:, 2] < 0.2)
    labels = np.zeros(n)
    start = 0
    cuts = np.cumsum(GRADE_SHARES)
    for size in sizes.tolist():
        # Rank within the query under the hidden score → grade by share of the list.
        order = np.argsort(-hidden[start : start + size], kind="stable")
        share = (np.arange(size) + 0.5) / size
        labels[start + order] = 4 - np.searchsorted(cuts, share, side="right").clip(0, 4)
        start += size
    return x.astype(np.float32), labels


def chunks(
    rows: int, features: int, queries: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(features, labels, group sizes) per chunk of CHUNK_QUERIES queries."""
    sizes = query_sizes(rows, queries, seed)
    weights = _hidden_weights(features, seed)
    for index, begin in enumerate(range(0, queries, CHUNK_QUERIES)):
        part = sizes[begin : begin + CHUNK_QUERIES]
        x, labels = _chunk(part, features, weights, seed, index)
        yield x, labels, part


def generate(rows: int, features: int, queries: int, seed: int = 0) -> RankingDataset:
    """The whole synthetic dataset in memory (query ids 1..queries)."""
    parts = list(chunks(rows, features, queries, seed))
    sizes = np.concatenate([p[2] for p in parts])
    return RankingDataset(
        features=np.ascontiguousarray(np.concatenate([p[0] for p in parts])),
        labels=np.concatenate([p[1] for p in parts]),
        group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=np.arange(1, queries + 1, dtype=np.int64),
        source=f"synthetic(rows={rows}, features={features}, queries={queries}, seed={seed})",
    )


def write(rows: int, features: int, queries: int, seed: int, out: Path) -> None:
    """Stream the dataset to `out` as LETOR text with `qid:`, one chunk in memory at a time."""
    next_qid = 1
    with out.open("w", encoding="utf-8") as handle:
        for x, labels, sizes in chunks(rows, features, queries, seed):
            row_qids = np.repeat(np.arange(next_qid, next_qid + sizes.size), sizes)
            write_rows(handle, x, labels, row_qids, significant_digits=DECIMALS)
            next_qid += sizes.size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--features", type=int, required=True)
    parser.add_argument("--queries", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.perf_counter()
    write(args.rows, args.features, args.queries, args.seed, args.out)
    size = args.out.stat().st_size / 1e6
    print(f"wrote {args.out} ({size:.1f} MB) in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
