"""LightGBM models whose splits sit on the zero band, and the inputs that probe it.

LightGBM turns every input with |x| <= kZeroThreshold (float32(1e-35) widened) into 0.0 before
the trees see it, and writes thresholds of exactly ±kZeroThreshold where a feature's zeros are
split from its positive or negative values. Features with many exact zeros on both sides of
them make such splits for every `missing_type`: None (no NaN in training), NaN (NaN in
training) and Zero (`zero_as_missing`).
"""

from __future__ import annotations

import re

import lightgbm as lgb
import numpy as np

from app.artifacts.tree_dump import ZERO_THRESHOLD

MISSING_TYPES = {"none": 0, "zero": 1, "nan": 2}

# Both edges of the band (LightGBM's float32 one and the plain double 1e-35), both zeros, and a
# value inside the band.
ZERO_BAND = [*sorted({v for x in (ZERO_THRESHOLD, 1e-35, 1e-36, 0.0) for v in (x, -x)}), -0.0]


def neighbours(values: list[float]) -> list[float]:
    """Each value with its float64 and float32 neighbours (the float32 ones widened)."""
    out: list[float] = []
    for v in values:
        v32 = np.float32(v)
        out += [v, float(np.nextafter(v, -np.inf)), float(np.nextafter(v, np.inf))]
        out += [float(v32), float(np.nextafter(v32, np.float32(-np.inf)))]
        out += [float(np.nextafter(v32, np.float32(np.inf)))]
    return out


def zero_band_booster(missing: str, *, seed: int = 0, rounds: int = 30) -> lgb.Booster:
    """A lambdarank model on 6 features, 30 % exact zeros; `missing` names its missing type."""
    rng = np.random.default_rng(seed)
    n, f = 3000, 6
    x = rng.normal(size=(n, f))
    x[rng.random((n, f)) < 0.3] = 0.0
    if missing == "nan":
        x[:, :3][rng.random((n, 3)) < 0.15] = np.nan
    # Negative values of feature 0, zeros of feature 1: splits right at both band edges.
    score = 3 * np.minimum(x[:, 0], 0) + (x[:, 1] == 0) + np.nan_to_num(x[:, 2])
    labels = np.digitize(score + rng.normal(0, 0.5, n), [-1, 0, 1, 2]).astype(np.float64)
    params = {
        "objective": "lambdarank",
        "num_leaves": 15,
        "min_data_in_leaf": 5,
        "verbose": -1,
        "num_threads": 1,
        "seed": seed,
        "zero_as_missing": missing == "zero",
    }
    data = lgb.Dataset(x.astype(np.float32), labels, group=[30] * (n // 30))
    return lgb.train(params, data, num_boost_round=rounds)


def split_thresholds(model_text: str) -> list[tuple[float, int]]:
    """Every split's (threshold, missing type) as written in the model text."""
    found: list[tuple[float, int]] = []
    thresholds = re.findall(r"^threshold=(.*)$", model_text, flags=re.M)
    decisions = re.findall(r"^decision_type=(.*)$", model_text, flags=re.M)
    for line_t, line_d in zip(thresholds, decisions, strict=True):
        for t, d in zip(line_t.split(), line_d.split(), strict=True):
            found.append((float(t), (int(d) >> 2) & 3))
    return found
