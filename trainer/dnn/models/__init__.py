"""Neural ranking models: an MLP (LambdaDNN) or a deep & cross network (LambdaDCN) behind the
shared `Ranker` front (standardisation and the optional user-cluster embedding)."""

from __future__ import annotations

from torch import nn

from trainer.dnn.models.dcn import DeepCross
from trainer.dnn.models.mlp import mlp
from trainer.dnn.models.ranker import Ranker
from trainer.dnn.normalisation import Standardiser
from trainer.dnn.options import DNNOptions

__all__ = ["Ranker", "build_ranker"]


def build_ranker(
    options: DNNOptions,
    standardiser: Standardiser,
    num_clusters: int | None = None,
    shared_rows: int = 0,
) -> Ranker:
    """The architecture `options.arch` for the standardiser's features, with an embedding table
    of `num_clusters` rows of `options.embedding_dim` when clusters are used, the last
    `shared_rows` of them field and combination rows (see Ranker).

    Call `torch.manual_seed` first: the initial weights come from torch's global generator.
    """
    dim = standardiser.num_features + (options.embedding_dim if num_clusters else 0)
    body: nn.Module
    if options.arch == "dcn":
        body = DeepCross(dim, options.cross_layers, options.hidden, options.dropout)
    else:
        body = mlp(dim, options.hidden, options.dropout)
    embedding_dim = options.embedding_dim if num_clusters else 0
    return Ranker(standardiser, body, num_clusters or None, embedding_dim, shared_rows)
