"""Feature pre-binning: per-feature quantile bin edges, NaN in its own bin.

Bin b of feature f holds the values in (edges[f, b-1], edges[f, b]], where every edge is a real
training value (float32 data converted exactly to float64), so `x <= edges[f, b]` holds exactly when
`bin(x) <= b` — a split on bin b exports as threshold edges[f, b] and scores identically. Values
above the last edge fall into the last real bin. NaN goes to bin `n_real[f]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

# What LightGBM samples to find bins (bin_construct_sample_cnt).
SAMPLE_ROWS = 200_000
# Threshold of a split that sends every real value left (only NaN right): above any finite
# float64, and still representable in JSON (infinity is not).
ALL_REAL_LEFT = float(np.finfo(np.float64).max)


@njit(cache=True, nogil=True)
def _feature_edges(column: np.ndarray, max_bin: int, out: np.ndarray) -> int:
    """Writes the bin upper edges of one column into out [max_bin]; returns how many."""
    values = np.sort(column[~np.isnan(column)])  # in the input dtype: float32 sorts faster
    n = values.size
    if n == 0:
        return 0
    distinct = np.empty(n, dtype=values.dtype)
    counts = np.empty(n, dtype=np.int64)
    nd = 0
    for i in range(n):
        if nd > 0 and values[i] == distinct[nd - 1]:
            counts[nd - 1] += 1
        else:
            distinct[nd] = values[i]
            counts[nd] = 1
            nd += 1
    nb = 0
    current = 0
    rest = n
    for i in range(nd):
        current += counts[i]
        if i == nd - 1:
            out[nb] = distinct[i]
            nb += 1
            break
        bins_left = max_bin - nb
        if bins_left == 1:
            continue
        target = rest / bins_left
        # Close the bin when it is full, when the next value is heavy enough to deserve a bin of
        # its own, or when every remaining value can have its own bin.
        if current >= target or counts[i + 1] >= target or nd - 1 - i <= bins_left - 1:
            out[nb] = distinct[i]
            nb += 1
            rest -= current
            current = 0
    return nb


@njit(cache=True, nogil=True, parallel=True)
def _all_edges(sample: np.ndarray, max_bin: int) -> tuple[np.ndarray, np.ndarray]:
    """sample: feature-major [n_features, n_rows]."""
    n_features = sample.shape[0]
    edges = np.full((n_features, max_bin), np.inf)
    n_real = np.zeros(n_features, dtype=np.int32)
    for f in prange(n_features):
        n_real[f] = _feature_edges(sample[f], max_bin, edges[f])
    return edges, n_real


@njit(cache=True, nogil=True)
def _bin_of(edges: np.ndarray, nr: int, x: float) -> int:
    """The first bin whose upper edge is >= x (the last real bin past the edges), NaN -> nr."""
    if np.isnan(x):
        return nr
    lo = 0
    hi = nr - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if edges[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, parallel=True)
def _apply(features: np.ndarray, edges: np.ndarray, n_real: np.ndarray, out: np.ndarray) -> None:
    n_rows, n_features = features.shape
    block = 2048
    # Blocks of rows, all features: reads the row-major input once, writes each feature's run.
    for blk in prange((n_rows + block - 1) // block):
        for r in range(blk * block, min(n_rows, (blk + 1) * block)):
            for f in range(n_features):
                out[f, r] = _bin_of(edges[f], n_real[f], np.float64(features[r, f]))


@dataclass(frozen=True)
class BinMapper:
    """Bin edges for every feature."""

    edges: np.ndarray  # float64 [n_features, max_bin], +inf past n_real[f]
    n_real: np.ndarray  # int32 [n_features]: real (non-NaN) bins; the NaN bin is n_real[f]

    @property
    def num_features(self) -> int:
        return int(self.n_real.shape[0])

    @property
    def bin_stride(self) -> int:
        """Bins a histogram needs per feature: the largest real bin count plus the NaN bin."""
        return int(self.n_real.max()) + 1 if self.n_real.size else 1

    def transform(self, features: np.ndarray) -> np.ndarray:
        """Bin indices, feature-major: uint8 or uint16 [n_features, n_rows]."""
        if features.ndim != 2 or features.shape[1] != self.num_features:
            raise ValueError(f"expected features [n, {self.num_features}], got {features.shape}")
        dtype = np.uint8 if self.bin_stride <= 256 else np.uint16
        out = np.empty((self.num_features, features.shape[0]), dtype=dtype)
        _apply(features, self.edges, self.n_real, out)
        return out

    def threshold(self, feature: int, bin_index: int) -> float:
        """The split value of `bin(x) <= bin_index`, as `x <= threshold`."""
        if bin_index >= int(self.n_real[feature]) - 1:
            return ALL_REAL_LEFT
        return float(self.edges[feature, bin_index])


def fit_bins(features: np.ndarray, max_bin: int, seed: int = 0) -> BinMapper:
    """Bin edges from features [n_rows, n_features] (NaN = missing), at most max_bin real bins
    per feature, from a sample of at most SAMPLE_ROWS rows."""
    if features.ndim != 2:
        raise ValueError("features must be 2-D [n_rows, n_features]")
    if max_bin < 2:
        raise ValueError("max_bin must be at least 2")
    sample = features
    if features.shape[0] > SAMPLE_ROWS:
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(features.shape[0], SAMPLE_ROWS, replace=False))
        sample = features[rows]
    edges, n_real = _all_edges(np.ascontiguousarray(sample.T), max_bin)
    return BinMapper(edges=edges, n_real=n_real)
