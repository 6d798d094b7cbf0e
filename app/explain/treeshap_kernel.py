"""The TreeSHAP kernel (numba): exact Shapley values of tree ensembles in polynomial time.

Algorithm 2 of Lundberg et al., "From local explanations to global understanding with
explainable AI for trees", Nature Machine Intelligence 2 (2020): the recursion keeps, along the
path to each leaf, the features seen so far with the fraction of training cover that would
follow the path if the feature were unknown (`zero`) and whether x itself follows it (`one`),
plus permutation weights; each leaf then adds its value times the weight difference to each
feature on the path. A feature met twice on one path is first unwound, then extended again.

Floating-point operations are written in the same order as LightGBM's (src/io/tree.cpp:
ExtendPath, UnwindPath, UnwoundPathSum, TreeSHAP), and trees are visited in the same order
(hot child first), so contributions agree with `predict(pred_contrib=True)` to rounding.
The recursion is an explicit stack here (numba compiles loops better than recursion); each
frame's path segment sits where LightGBM's recursion would put it.

Splits follow the tree dump's rule exactly (app/scoring/reference.py): NaN, and |x| <= 1e-35 on
`missing_zero` nodes, take the default direction; otherwise `x <= threshold` goes left.
"""

from __future__ import annotations

import numba
import numpy as np

ZERO_THRESHOLD = 1e-35  # app.artifacts.tree_dump.ZERO_THRESHOLD (kept literal for numba)


def _jit(fn):  # type: ignore[no-untyped-def]
    """Compiled without the GIL, cached on disk when a cache directory is writable (numba
    refuses caching outright when none is, e.g. a read-only install without NUMBA_CACHE_DIR)."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:
        return numba.njit(nogil=True)(fn)


@_jit
def _extend(feat, zero, one, pw, off, depth, zero_fraction, one_fraction, feature):  # type: ignore[no-untyped-def]
    feat[off + depth] = feature
    zero[off + depth] = zero_fraction
    one[off + depth] = one_fraction
    pw[off + depth] = 1.0 if depth == 0 else 0.0
    for i in range(depth - 1, -1, -1):
        pw[off + i + 1] += one_fraction * pw[off + i] * (i + 1) / (depth + 1.0)
        pw[off + i] = zero_fraction * pw[off + i] * (depth - i) / (depth + 1.0)


@_jit
def _unwind(feat, zero, one, pw, off, depth, path_index):  # type: ignore[no-untyped-def]
    one_fraction = one[off + path_index]
    zero_fraction = zero[off + path_index]
    next_one_portion = pw[off + depth]
    for i in range(depth - 1, -1, -1):
        if one_fraction != 0.0:
            tmp = pw[off + i]
            pw[off + i] = next_one_portion * (depth + 1) / ((i + 1) * one_fraction)
            next_one_portion = tmp - pw[off + i] * zero_fraction * (depth - i) / (depth + 1.0)
        else:
            pw[off + i] = (pw[off + i] * (depth + 1)) / (zero_fraction * (depth - i))
    for i in range(path_index, depth):
        feat[off + i] = feat[off + i + 1]
        zero[off + i] = zero[off + i + 1]
        one[off + i] = one[off + i + 1]


@_jit
def _unwound_sum(zero, one, pw, off, depth, path_index):  # type: ignore[no-untyped-def]
    one_fraction = one[off + path_index]
    zero_fraction = zero[off + path_index]
    next_one_portion = pw[off + depth]
    total = 0.0
    for i in range(depth - 1, -1, -1):
        if one_fraction != 0.0:
            tmp = next_one_portion * (depth + 1) / ((i + 1) * one_fraction)
            total += tmp
            next_one_portion = pw[off + i] - tmp * zero_fraction * ((depth - i) / (depth + 1.0))
        else:
            total += (pw[off + i] / zero_fraction) / ((depth - i) / (depth + 1.0))
    return total


@_jit
def shap_values(  # type: ignore[no-untyped-def]
    x,  # float64 [n_rows, n_features]
    split_feature,
    threshold,
    left,
    right,
    default_left,
    missing_zero,
    cover,
    leaf_cover,
    leaf_value,
    node_offset,
    leaf_offset,
    max_depth,
    out,  # float64 [n_rows, n_features + 1]; contributions are added to it
):
    """Adds each row's per-feature contributions of every tree to out[:, :n_features]."""
    size = (max_depth + 2) * (max_depth + 3) // 2
    feat = np.empty(size, np.int64)
    zero = np.empty(size, np.float64)
    one = np.empty(size, np.float64)
    pw = np.empty(size, np.float64)
    frames = 2 * (max_depth + 2)
    s_node = np.empty(frames, np.int64)
    s_depth = np.empty(frames, np.int64)
    s_parent = np.empty(frames, np.int64)
    s_zero = np.empty(frames, np.float64)
    s_one = np.empty(frames, np.float64)
    s_feat = np.empty(frames, np.int64)
    n_trees = node_offset.shape[0] - 1
    for r in range(x.shape[0]):
        phi = out[r]
        for t in range(n_trees):
            nb = node_offset[t]
            lb = leaf_offset[t]
            sp = 0
            s_node[0] = 0
            s_depth[0] = 0
            s_parent[0] = 0
            s_zero[0] = 1.0
            s_one[0] = 1.0
            s_feat[0] = -1
            sp = 1
            while sp > 0:
                sp -= 1
                node = s_node[sp]
                depth = s_depth[sp]
                parent = s_parent[sp]
                off = parent + depth
                for i in range(depth):
                    feat[off + i] = feat[parent + i]
                    zero[off + i] = zero[parent + i]
                    one[off + i] = one[parent + i]
                    pw[off + i] = pw[parent + i]
                _extend(feat, zero, one, pw, off, depth, s_zero[sp], s_one[sp], s_feat[sp])
                if node < 0:
                    value = leaf_value[lb + ~node]
                    for i in range(1, depth + 1):
                        w = _unwound_sum(zero, one, pw, off, depth, i)
                        phi[feat[off + i]] += w * (one[off + i] - zero[off + i]) * value
                    continue
                g = nb + node
                f = split_feature[g]
                v = x[r, f]
                missing = np.isnan(v) or (missing_zero[g] and abs(v) <= ZERO_THRESHOLD)
                go_left = default_left[g] if missing else v <= threshold[g]
                hot = left[g] if go_left else right[g]
                cold = right[g] if go_left else left[g]
                w_node = cover[g]
                hot_zero = (cover[nb + hot] if hot >= 0 else leaf_cover[lb + ~hot]) / w_node
                cold_zero = (cover[nb + cold] if cold >= 0 else leaf_cover[lb + ~cold]) / w_node
                incoming_zero = 1.0
                incoming_one = 1.0
                path_index = 0
                while path_index <= depth:
                    if feat[off + path_index] == f:
                        break
                    path_index += 1
                if path_index != depth + 1:
                    incoming_zero = zero[off + path_index]
                    incoming_one = one[off + path_index]
                    _unwind(feat, zero, one, pw, off, depth, path_index)
                    depth -= 1
                # Cold below hot on the stack: the hot subtree runs first, as in LightGBM.
                s_node[sp] = cold
                s_depth[sp] = depth + 1
                s_parent[sp] = off
                s_zero[sp] = cold_zero * incoming_zero
                s_one[sp] = 0.0
                s_feat[sp] = f
                sp += 1
                s_node[sp] = hot
                s_depth[sp] = depth + 1
                s_parent[sp] = off
                s_zero[sp] = hot_zero * incoming_zero
                s_one[sp] = incoming_one
                s_feat[sp] = f
                sp += 1
