"""LambdaDNN's network (Haldar et al. 2019, "Applying Deep Learning to Airbnb Search"): a plain
multi-layer perceptron scoring one document."""

from __future__ import annotations

from torch import nn


def mlp(input_dim: int, hidden: list[int], dropout: float, output_dim: int = 1) -> nn.Sequential:
    """Linear → ReLU → Dropout per hidden size, then a linear output layer.

    Maps float [..., input_dim] to [..., output_dim]; with output_dim 0 the output layer is left
    out and the last hidden size is the output width.
    """
    layers: list[nn.Module] = []
    width = input_dim
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = size
    if output_dim:
        layers.append(nn.Linear(width, output_dim))
    return nn.Sequential(*layers)
