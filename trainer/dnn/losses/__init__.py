"""Ranking losses, one per module; each takes scores, labels and a padding mask, all
`[batch, list_len]`, and returns a scalar that padding does not change."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from trainer.dnn.losses.lambdarank import lambdarank_loss
from trainer.dnn.losses.listnet import listnet_loss
from trainer.dnn.losses.pointwise import pointwise_loss
from trainer.dnn.losses.ranknet import ranknet_loss
from trainer.dnn.options import DNNOptions

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

__all__ = [
    "LossFn",
    "lambdarank_loss",
    "listnet_loss",
    "loss_for",
    "pointwise_loss",
    "ranknet_loss",
]


def loss_for(options: DNNOptions) -> LossFn:
    """The loss the options name, with its sigma and cut-off bound."""
    if options.loss == "lambdarank":
        return partial(lambdarank_loss, sigma=options.sigma, k=options.ndcg_k)
    if options.loss == "ranknet":
        return partial(ranknet_loss, sigma=options.sigma)
    if options.loss == "listnet":
        return listnet_loss
    return pointwise_loss
