"""The per-split histogram pass: the smaller child's histograms (per feature column, or gathered
row by row for a thin leaf), the larger child's by subtraction, and both children's best splits,
with the features spread over threads."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from trainer.lambdamart.histogram import (
    build_feature_histogram,
    build_gathered_histograms,
    subtract_histogram,
)
from trainer.lambdamart.split import best_feature_split

# Rows x features below which a histogram pass stays on one thread: waking the other threads
# costs more than they save, and far more on a busy machine.
PARALLEL_WORK = 100_000
# A leaf holding less than this share of the rows gathers its bins row by row first: reading a
# column per feature would cost a cache line per value (measured: 3x faster at 1%, slower > 10%).
ROW_WISE_SHARE = 0.06


@njit(cache=True, nogil=True)
def _feature_step(
    k: int,
    feats: np.ndarray,
    bins: np.ndarray,
    n_real: np.ndarray,
    order: np.ndarray,
    og: np.ndarray,
    oh: np.ndarray,
    pool: np.ndarray,
    small: np.ndarray,
    large: np.ndarray,
    limits: np.ndarray,
    results: np.ndarray,
    build: bool,
    spare: np.ndarray,
) -> None:
    """Histogram of the smaller leaf for feature feats[k] (unless already built), the larger one
    by subtraction, and the best split of each. small/large: [buffer, start, count, grad, hess,
    can_split] (buffer < 0 = no such leaf); results [2, n_used, 6] receives (gain, bin,
    default_left, grad, hess, count)."""
    f = feats[k]
    nr = n_real[f]
    sb = int(small[0])
    start = int(small[1])
    stop = start + int(small[2])
    hs = pool[sb, f]
    if build:
        rows = order[start:stop]
        build_feature_histogram(bins[f], rows, og[start:stop], oh[start:stop], hs, nr + 1, spare)
    min_data = int(limits[0])
    for side in range(2):
        leaf = small if side == 0 else large
        buf = int(leaf[0])
        if buf < 0:
            results[side, k, 0] = -np.inf
            continue
        hist = pool[buf, f]
        if side == 1:
            subtract_histogram(hist, hs, nr + 1)
        if leaf[5] == 0.0:
            results[side, k, 0] = -np.inf
            continue
        r = best_feature_split(hist, nr, leaf[3], leaf[4], leaf[2], min_data, limits[1], limits[2])
        results[side, k, 0] = r[0]
        results[side, k, 1] = r[1]
        results[side, k, 2] = 1.0 if r[2] else 0.0
        results[side, k, 3] = r[3]
        results[side, k, 4] = r[4]
        results[side, k, 5] = r[5]


@njit(cache=True, nogil=True)
def _block_step(
    lo: int,
    hi: int,
    feats: np.ndarray,
    bins: np.ndarray,
    row_bins: np.ndarray,
    n_real: np.ndarray,
    order: np.ndarray,
    og: np.ndarray,
    oh: np.ndarray,
    pool: np.ndarray,
    small: np.ndarray,
    large: np.ndarray,
    limits: np.ndarray,
    results: np.ndarray,
    row_wise: bool,
    scratch: np.ndarray,
) -> None:
    """_feature_step for the features feats[lo:hi], gathering a thin leaf's bins first."""
    if row_wise:
        start = int(small[1])
        stop = start + int(small[2])
        build_gathered_histograms(
            row_bins,
            order[start:stop],
            og[start:stop],
            oh[start:stop],
            feats[lo:hi],
            n_real,
            pool[int(small[0])],
            scratch[lo:hi],
        )
    spare = np.empty((pool.shape[2], 3))
    for k in range(lo, hi):
        _feature_step(
            k,
            feats,
            bins,
            n_real,
            order,
            og,
            oh,
            pool,
            small,
            large,
            limits,
            results,
            not row_wise,
            spare,
        )


@njit(cache=True, nogil=True, parallel=True)
def leaf_histograms(
    feats: np.ndarray,
    bins: np.ndarray,
    row_bins: np.ndarray,
    n_real: np.ndarray,
    order: np.ndarray,
    og: np.ndarray,
    oh: np.ndarray,
    pool: np.ndarray,
    small: np.ndarray,
    large: np.ndarray,
    limits: np.ndarray,
    results: np.ndarray,
    row_wise: bool,
    scratch: np.ndarray,
    blocks: int,
) -> None:
    """All used features in `blocks` blocks, one per thread (each owns its features'
    histograms: no reduction, one parallel region per split)."""
    n_used = feats.size
    if blocks <= 1:
        _block_step(
            0,
            n_used,
            feats,
            bins,
            row_bins,
            n_real,
            order,
            og,
            oh,
            pool,
            small,
            large,
            limits,
            results,
            row_wise,
            scratch,
        )
        return
    for blk in prange(blocks):
        lo = blk * n_used // blocks
        hi = (blk + 1) * n_used // blocks
        _block_step(
            lo,
            hi,
            feats,
            bins,
            row_bins,
            n_real,
            order,
            og,
            oh,
            pool,
            small,
            large,
            limits,
            results,
            row_wise,
            scratch,
        )
