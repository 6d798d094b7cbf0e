"""The scoring network shared by every architecture: standardise the raw features, append the
list's user-cluster embedding when there is one, and score each document with a body network."""

from __future__ import annotations

import torch
from torch import nn

from trainer.dnn.normalisation import Standardiser

EMBEDDING_INIT_STD = 0.1


class Ranker(nn.Module):
    """scores = body([standardise(features), user embedding]).

    `body` maps float [..., input_dim] to [..., 1], input_dim = n_features (+ embedding_dim).
    With `num_clusters` (rows of the user table: cluster rows, then any field and combination
    rows), the ranker owns an embedding table float [num_clusters + 1, embedding_dim] whose
    last row is an all-zero padding row (an absent field); `table` is the table without it.

    The last `shared_rows` rows before the padding (field and combination rows: the same keys
    whatever the order of the scheme's fields) are initialised first, from a generator of their
    own seeded from torch's global one, so they start alike and the global generator (dropout)
    runs alike whatever the number of cluster rows: two field orders differ by the cluster ids
    only, not by initial weights.
    """

    def __init__(
        self,
        standardiser: Standardiser,
        body: nn.Module,
        num_clusters: int | None = None,
        embedding_dim: int = 0,
        shared_rows: int = 0,
    ) -> None:
        super().__init__()
        self.standardiser = standardiser
        self.body = body
        self.embedding: nn.Embedding | None = None
        if num_clusters is not None:
            if embedding_dim < 1:
                raise ValueError("a ranker with user clusters needs embedding_dim >= 1")
            if not 0 <= shared_rows < num_clusters:
                raise ValueError("shared_rows must leave at least the unknown cluster's row")
            self.embedding = nn.Embedding.from_pretrained(
                _initial_table(num_clusters, shared_rows, embedding_dim),
                freeze=False,
                padding_idx=num_clusters,
            )

    @property
    def num_features(self) -> int:
        return self.standardiser.num_features

    @property
    def embedding_dim(self) -> int:
        return 0 if self.embedding is None else int(self.embedding.embedding_dim)

    @property
    def table(self) -> torch.Tensor:
        """float [num_clusters, embedding_dim]: the user table without the padding row."""
        assert self.embedding is not None
        return self.embedding.weight[:-1]

    def user_vectors(self, rows: torch.Tensor) -> torch.Tensor:
        """rows int64 [batch] (a cluster row) or [batch, 1 + n_fields] (cluster and field rows,
        padding row for an absent field) → float [batch, embedding_dim], the sum of the rows."""
        assert self.embedding is not None
        vectors = self.embedding(rows)
        return vectors.sum(dim=1) if vectors.dim() == 3 else vectors

    def forward(self, features: torch.Tensor, clusters: torch.Tensor | None = None) -> torch.Tensor:
        """features float [batch, list_len, n_features] (NaN = missing); clusters int64 [batch]
        or [batch, 1 + n_fields] (see `user_vectors`; required iff the ranker has an embedding
        table). Returns scores [batch, list_len]."""
        x = self.standardiser(features)
        if self.embedding is not None:
            if clusters is None:
                raise ValueError("this ranker needs the cluster index of every list")
            user = self.user_vectors(clusters)[:, None, :].expand(-1, x.shape[1], -1)
            x = torch.cat([x, user], dim=-1)
        return self.body(x).squeeze(-1)

    def score_list(self, features: torch.Tensor, user: torch.Tensor | None = None) -> torch.Tensor:
        """One list as the service sends it: features float [n_docs, n_features], user float
        [1, embedding_dim] (the cluster's embedding row). Returns scores [n_docs]."""
        x = self.standardiser(features)
        if self.embedding is not None:
            if user is None:
                raise ValueError("this ranker needs the user's cluster embedding")
            x = torch.cat([x, user.expand(x.shape[0], user.shape[1])], dim=1)
        return self.body(x).squeeze(-1)


def _initial_table(num_clusters: int, shared_rows: int, dim: int) -> torch.Tensor:
    """float [num_clusters + 1, dim]: N(0, EMBEDDING_INIT_STD) rows, the shared rows (the last
    `shared_rows` before the zero padding row) drawn first, from a generator seeded by one draw
    of torch's global generator, which thus advances alike whatever num_clusters is."""
    seed = int(torch.randint(0, 2**62, (1,)).item())
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randn(shared_rows, dim, generator=generator)
    clusters = torch.randn(num_clusters - shared_rows, dim, generator=generator)
    return torch.cat([clusters, shared, torch.zeros(1, dim)]) * EMBEDDING_INIT_STD
