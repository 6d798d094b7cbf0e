"""Best split of one feature from its histogram, NaN trying both directions.

gain = G_L^2 / (H_L + l2) + G_R^2 / (H_R + l2) - G^2 / (H + l2), the Newton gain LightGBM and
XGBoost use. A split on bin t sends real bins 0..t left; NaN (bin n_real) goes left or right,
whichever gains more. t = n_real - 1 separates the real values from NaN.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from trainer.lambdamart.histogram import COUNT, GRAD, HESS

# A hessian sum below this is treated as empty: keeps leaf outputs finite when l2 = 0.
HESS_EPS = 1e-15


@njit(cache=True, nogil=True)
def _side_ok(count: float, hess: float, min_data: int, min_hess: float, l2: float) -> bool:
    return count >= min_data and hess >= min_hess and hess + l2 > HESS_EPS


@njit(cache=True, nogil=True)
def best_feature_split(
    hist: np.ndarray,
    n_real: int,
    sum_grad: float,
    sum_hess: float,
    count: float,
    min_data: int,
    min_hess: float,
    l2: float,
) -> tuple[float, int, bool, float, float, float]:
    """(gain, bin, default_left, left grad, left hess, left count) of the best split of one
    feature's histogram [n_real + 1, 3]; gain is -inf when no split is allowed."""
    parent = sum_grad * sum_grad / max(sum_hess + l2, HESS_EPS)
    g_nan = hist[n_real, GRAD]
    h_nan = hist[n_real, HESS]
    c_nan = hist[n_real, COUNT]
    best = -np.inf
    best_bin = -1
    best_dl = False
    best_g = 0.0
    best_h = 0.0
    best_c = 0.0
    g = 0.0
    h = 0.0
    c = 0.0
    for t in range(n_real):
        if hist[t, COUNT] == 0.0:
            continue  # same partition as the last non-empty bin, already tried
        g += hist[t, GRAD]
        h += hist[t, HESS]
        c += hist[t, COUNT]
        if count - c < min_data:
            break  # the right side only shrinks from here
        # NaN right; at the last real bin this is the real-vs-NaN split.
        if t < n_real - 1 or c_nan > 0:
            gr = sum_grad - g
            hr = sum_hess - h
            cr = count - c
            if _side_ok(c, h, min_data, min_hess, l2) and _side_ok(cr, hr, min_data, min_hess, l2):
                gain = g * g / (h + l2) + gr * gr / (hr + l2) - parent
                if gain > best:
                    best, best_bin, best_dl, best_g, best_h, best_c = gain, t, False, g, h, c
        # NaN left.
        if c_nan > 0 and t < n_real - 1:
            gl = g + g_nan
            hl = h + h_nan
            cl = c + c_nan
            gr = sum_grad - gl
            hr = sum_hess - hl
            cr = count - cl
            if _side_ok(cl, hl, min_data, min_hess, l2) and _side_ok(
                cr, hr, min_data, min_hess, l2
            ):
                gain = gl * gl / (hl + l2) + gr * gr / (hr + l2) - parent
                if gain > best:
                    best, best_bin, best_dl, best_g, best_h, best_c = gain, t, True, gl, hl, cl
    if best_bin >= 0 and c_nan == 0:
        # No NaN seen here: unseen NaN follows the larger side (where the feature was never
        # missing in training, TreeLearner.grow sends it with 0.0 instead).
        best_dl = best_c >= count - best_c
    return best, best_bin, best_dl, best_g, best_h, best_c
