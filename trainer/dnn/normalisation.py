"""Feature standardisation learned on the training set, baked into the network as its first
layer so that the exported graph takes raw features (NaN = missing) exactly as the service sends
them.

A missing value is imputed before scaling: with the training mean for a feature that had
missing values in the training data, with 0 for one that never had. Sparse LETOR/SVMlight files
write 0 by leaving a feature out, and a client that leaves a feature out of a request sends it
missing: for a feature training never saw missing, 0 is what training saw in its place (LightGBM
and the native tree learner read such a value as 0 too, see trainer.lambdamart.tree_learner).

A feature without spread in the training data (missing in every row, or one value wherever it
is present) is always 0 after standardising, so the first layer's weights on it never train:
a served value that differs would add a contribution of random initial weights (a trial:
-0.27 for a feature that was NaN throughout training). Such a feature is served as training
saw it, whatever a request sends (0 after standardising), as a tree model never splits on it."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

# A column whose spread is below this is left unscaled: dividing by ~0 would blow up the first
# value that differs from the training constant.
MIN_STD = 1e-6


class Standardiser(nn.Module):
    """`x → (impute(x) - mean) / std`, NaN replaced by `fill` (per feature: the training mean,
    or 0 for a feature the training data never had missing; see the module docstring), and 0
    for a feature `varied` marks False (no spread in training), whatever its value.

    Input float32 [..., n_features]; output the same shape. The statistics are buffers, so they
    are saved with the model and appear as constants in the ONNX graph. `fill` defaults to
    `mean` (mean imputation of every feature), `varied` to every feature.
    """

    mean: torch.Tensor
    std: torch.Tensor
    fill: torch.Tensor
    varied: torch.Tensor

    def __init__(
        self,
        mean: np.ndarray,
        std: np.ndarray,
        fill: np.ndarray | None = None,
        varied: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        fill = mean if fill is None else fill
        varied = np.ones(mean.shape, dtype=bool) if varied is None else varied
        if mean.ndim != 1 or any(a.shape != mean.shape for a in (std, fill, varied)):
            raise ValueError("mean, std, fill and varied must all be [n_features]")
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))
        self.register_buffer("fill", torch.as_tensor(fill, dtype=torch.float32))
        self.register_buffer("varied", torch.as_tensor(varied, dtype=torch.bool))
        # A graph without the extra node when every feature varied: models as before.
        self._masked = not bool(np.all(varied))

    @property
    def num_features(self) -> int:
        return int(self.mean.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.where(torch.isnan(x), self.fill, x)
        scaled = (x - self.mean) / self.std
        if not self._masked:
            return scaled
        # `where`, not a product: 0 x inf would be NaN.
        return torch.where(self.varied, scaled, torch.zeros_like(scaled))


def fit_standardiser(features: np.ndarray) -> Standardiser:
    """Column means and standard deviations of float [n_docs, n_features], NaN ignored, the
    value a missing one takes (the mean in a column with a NaN, else 0) and which columns
    vary (see the module docstring).

    An all-NaN column gets mean 0; a constant column gets std 1; an infinite value is a
    ValueError.
    """
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError("features must be a non-empty [n_docs, n_features] array")
    if np.isinf(x).any():
        # The mean and spread would be inf/NaN and so every score; callers with names to
        # report check first (trainer.dnn.feature_checks).
        column = int(np.argwhere(np.isinf(x))[0][1])
        raise ValueError(f"feature column {column} holds an infinite value (NaN = missing)")
    present = ~np.isnan(x)
    count = present.sum(axis=0)
    filled = np.where(present, x, 0.0)
    mean = np.divide(filled.sum(axis=0), count, out=np.zeros(x.shape[1]), where=count > 0)
    centred = np.where(present, x - mean, 0.0)
    var = np.divide((centred**2).sum(axis=0), count, out=np.zeros(x.shape[1]), where=count > 0)
    std = np.sqrt(var)
    std = np.where(std < MIN_STD, 1.0, std)
    fill = np.where(count < x.shape[0], mean, 0.0)
    # fmin/fmax skip NaN; an all-NaN column stays NaN, and NaN > NaN is False.
    varied = np.fmax.reduce(x, axis=0) > np.fmin.reduce(x, axis=0)
    return Standardiser(
        mean.astype(np.float32), std.astype(np.float32), fill.astype(np.float32), varied
    )
