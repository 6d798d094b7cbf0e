"""LambdaDCN's network (after Haldar et al. 2019; Wang et al. 2017, Deep & Cross Network): a
cross network beside a deep network, both reading the same input, joined by a linear output
layer.

Each cross layer crosses its input with the first layer's input explicitly and learns the
residual: x_{l+1} = x_0 * (x_l · w_l) + b_l + x_l.

The cross network reads standardised features clipped to ±CROSS_CLIP: its output is a polynomial
of degree layers + 1 in its input, so one outlier (sparse LETOR columns reach 50 standard
deviations) would dominate it and make float32 rounding visible (PyTorch vs onnxruntime). The
deep part sees the unclipped input.
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.dnn.models.mlp import mlp

CROSS_CLIP = 5.0


class CrossLayer(nn.Module):
    """One cross layer: float [..., dim] (x_0 and x_l) → [..., dim]."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim) / dim**0.5)
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * (x * self.weight).sum(dim=-1, keepdim=True) + self.bias + x


class DeepCross(nn.Module):
    """float [..., input_dim] → scores [..., 1]."""

    def __init__(
        self, input_dim: int, cross_layers: int, hidden: list[int], dropout: float
    ) -> None:
        super().__init__()
        if not hidden:
            raise ValueError("the deep part of a DCN needs at least one hidden layer")
        self.cross = nn.ModuleList(CrossLayer(input_dim) for _ in range(cross_layers))
        self.deep = mlp(input_dim, hidden, dropout, output_dim=0)
        self.out = nn.Linear(input_dim + hidden[-1], 1)

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        c0 = x0.clamp(-CROSS_CLIP, CROSS_CLIP)
        x = c0
        for layer in self.cross:
            x = layer(c0, x)
        return self.out(torch.cat([x, self.deep(x0)], dim=-1))
