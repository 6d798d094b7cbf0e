"""Query lists → padded tensors: whole lists only, shuffled by query each epoch.

Seed 002 warns that padding defaults pollute lists; every batch therefore carries a mask and the
losses read nothing where it is False. Padded documents have zero features and label `PAD_LABEL`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

PAD_LABEL = -1.0


@dataclass(frozen=True)
class ListBatch:
    """A batch of whole query lists.

    features: float32 [batch, max_len, n_features] (raw; NaN = missing, padding = 0)
    labels: float32 [batch, max_len] (padding = PAD_LABEL)
    mask: bool [batch, max_len], True for a real document
    queries: int64 [batch], the query index of each list in its dataset
    clusters: int64 [batch], the user-cluster row of each list, or None
    """

    features: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor
    queries: torch.Tensor
    clusters: torch.Tensor | None = None


class QueryLists:
    """Documents grouped by query, ready to be cut into padded batches of whole lists.

    features: float32 [n_docs, n_features]; labels: [n_docs]; group_offsets: int64
    [n_queries + 1]; clusters: int64 [n_queries] or None.
    """

    def __init__(
        self,
        features: np.ndarray,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        clusters: np.ndarray | None = None,
    ) -> None:
        offsets = np.asarray(group_offsets, dtype=np.int64)
        if offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0:
            raise ValueError("group_offsets must be [n_queries + 1] starting at 0")
        if offsets[-1] != features.shape[0] or np.any(np.diff(offsets) <= 0):
            raise ValueError("group_offsets must end at n_docs and every list must be non-empty")
        if clusters is not None and len(clusters) != offsets.size - 1:
            raise ValueError("one cluster index per query expected")
        n_docs, n_features = features.shape
        # One extra all-zero row at the end: padding positions gather it.
        table = np.zeros((n_docs + 1, n_features), dtype=np.float32)
        table[:n_docs] = features
        self._features = torch.from_numpy(table)
        self._labels = torch.from_numpy(
            np.concatenate([np.asarray(labels, dtype=np.float32), [PAD_LABEL]]).astype(np.float32)
        )
        self.offsets = offsets
        self.sizes = np.diff(offsets)
        self._clusters = None if clusters is None else torch.as_tensor(clusters, dtype=torch.int64)

    @property
    def num_queries(self) -> int:
        return int(self.sizes.size)

    @property
    def num_features(self) -> int:
        return int(self._features.shape[1])

    def subset(self, queries: np.ndarray) -> QueryLists:
        """The given lists (in this order) as their own QueryLists."""
        queries = np.asarray(queries, dtype=np.int64)
        sizes = self.sizes[queries]
        rows = np.concatenate([np.arange(self.offsets[q], self.offsets[q + 1]) for q in queries])
        return QueryLists(
            self._features[rows].numpy(),
            self._labels[rows].numpy(),
            np.concatenate([[0], np.cumsum(sizes)]),
            None if self._clusters is None else self._clusters[queries].numpy(),
        )

    def batch(self, queries: np.ndarray) -> ListBatch:
        """Pad the given lists (in this order) to the longest of them."""
        queries = np.asarray(queries, dtype=np.int64)
        sizes = self.sizes[queries]
        max_len = int(sizes.max())
        pos = np.arange(max_len)
        mask = pos[None, :] < sizes[:, None]  # [batch, max_len]
        pad_row = self._features.shape[0] - 1
        rows = np.where(mask, self.offsets[queries][:, None] + pos[None, :], pad_row)
        index = torch.from_numpy(rows)
        return ListBatch(
            features=self._features[index],
            labels=self._labels[index],
            mask=torch.from_numpy(mask),
            queries=torch.from_numpy(queries),
            clusters=None if self._clusters is None else self._clusters[torch.from_numpy(queries)],
        )

    def batches(self, batch_queries: int, order: np.ndarray | None = None) -> Iterator[ListBatch]:
        """Consecutive batches of `batch_queries` whole lists, in `order` (default: as stored)."""
        if batch_queries < 1:
            raise ValueError("batch_queries must be >= 1")
        order = np.arange(self.num_queries) if order is None else np.asarray(order, np.int64)
        for start in range(0, order.size, batch_queries):
            yield self.batch(order[start : start + batch_queries])


class EpochShuffler:
    """A new order of the queries every epoch from one seeded generator, so a run replays."""

    def __init__(self, num_queries: int, seed: int) -> None:
        self.num_queries = num_queries
        self._rng = np.random.default_rng(seed)

    def next_order(self) -> np.ndarray:
        """int64 [n_queries]: a permutation of the query indices."""
        return self._rng.permutation(self.num_queries).astype(np.int64)
