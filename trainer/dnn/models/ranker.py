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
    With `num_clusters` (rows of the user table: cluster rows, then any per-field rows), the
    ranker owns an embedding table float [num_clusters + 1, embedding_dim] whose last row is an
    all-zero padding row (an absent field); `table` is the table without it.
    """

    def __init__(
        self,
        standardiser: Standardiser,
        body: nn.Module,
        num_clusters: int | None = None,
        embedding_dim: int = 0,
    ) -> None:
        super().__init__()
        self.standardiser = standardiser
        self.body = body
        self.embedding: nn.Embedding | None = None
        if num_clusters is not None:
            if embedding_dim < 1:
                raise ValueError("a ranker with user clusters needs embedding_dim >= 1")
            self.embedding = nn.Embedding(num_clusters + 1, embedding_dim, padding_idx=num_clusters)
            nn.init.normal_(self.embedding.weight, std=EMBEDDING_INIT_STD)
            with torch.no_grad():
                self.embedding.weight[num_clusters].zero_()

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
