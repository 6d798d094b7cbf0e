"""The TreeSHAP kernel (numba): exact Shapley values of tree ensembles in polynomial time.

Algorithm 2 of Lundberg et al., "From local explanations to global understanding with
explainable AI for trees", Nature Machine Intelligence 2 (2020): the recursion keeps, along the
path to each leaf, the features seen so far with the fraction of training cover that would
follow the path if the feature were unknown (`zero`) and whether x itself follows it (`one`),
plus permutation weights `pw`; each leaf then adds its value times the weight difference to
each feature on the path. A feature met twice on one path is first unwound, then extended again.

Rows in lanes: the recursion visits every node of a tree whatever x is (x only decides which
child gets one = 1), so a block of rows walks each tree together, `one` and `pw` holding one
value per row and the loops over rows vectorising. Arithmetic follows LightGBM's (src/io/
tree.cpp: ExtendPath, UnwindPath, UnwoundPathSum, TreeSHAP) term by term; only the order in
which leaves are summed differs (left child first here, the followed child first there), so
contributions agree with `predict(pred_contrib=True)` to ~1e-15 relative. The recursion is an
explicit stack; each frame's path segment sits where LightGBM's recursion would put it.

Splits follow the tree dump's rule exactly (app/scoring/reference.py): NaN, and |x| <= 1e-35 on
`missing_zero` nodes, take the default direction; otherwise `x <= threshold` goes left.
"""

from __future__ import annotations

import numba
import numpy as np

# LightGBM's kZeroThreshold as the dump defines it (1e-35f widened to double). A literal, not an
# import: numba freezes globals into its on-disk cache, which only this file's changes refresh.
ZERO_THRESHOLD = 1.0000000180025095e-35
MAX_LANES = 16  # rows walked together: enough to fill vector registers, few enough for L1


def _jit(fn):  # type: ignore[no-untyped-def]
    """Compiled without the GIL, cached on disk when a cache directory is writable (numba
    refuses caching outright when none is, e.g. a read-only install without NUMBA_CACHE_DIR)."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:
        return numba.njit(nogil=True)(fn)


@_jit
def _leaf(feat, zero, one, pw, off, depth, value, lanes, nop, total, phi):  # type: ignore[no-untyped-def]
    """Adds a leaf's share to phi [n_features + 1, lanes] for every feature on the path."""
    for k in range(1, depth + 1):
        zk = zero[off + k]
        for r in range(lanes):
            nop[r] = pw[off + depth, r]
            total[r] = 0.0
        for i in range(depth - 1, -1, -1):  # UnwoundPathSum, both branches per lane
            a = (depth + 1.0) / (i + 1)
            c = zk * ((depth - i) / (depth + 1.0))
            e = (depth - i) / (depth + 1.0)
            for r in range(lanes):
                hot = one[off + k, r] != 0.0
                p = pw[off + i, r]
                tmp = nop[r] * a
                total[r] += tmp if hot else (p / zk) / e
                nop[r] = p - tmp * c if hot else nop[r]
        f = feat[off + k]
        for r in range(lanes):
            phi[f, r] += total[r] * (one[off + k, r] - zk) * value


@_jit
def _unwind(feat, zero, one, pw, off, depth, path_index, lanes, nop):  # type: ignore[no-untyped-def]
    """UnwindPath: removes element path_index from the path (weights, then the entries)."""
    zp = zero[off + path_index]
    for r in range(lanes):
        nop[r] = pw[off + depth, r]
    for i in range(depth - 1, -1, -1):
        a = (depth + 1.0) / (i + 1)
        c = zp * (depth - i) / (depth + 1.0)
        e = zp * (depth - i)
        for r in range(lanes):
            p = pw[off + i, r]
            if one[off + path_index, r] != 0.0:
                pw[off + i, r] = nop[r] * a
                nop[r] = p - pw[off + i, r] * c
            else:
                pw[off + i, r] = (p * (depth + 1)) / e
    for i in range(path_index, depth):
        feat[off + i] = feat[off + i + 1]
        zero[off + i] = zero[off + i + 1]
        for r in range(lanes):
            one[off + i, r] = one[off + i + 1, r]


@_jit
def _tree(  # type: ignore[no-untyped-def]
    xb, lanes, nb, lb, split_feature, threshold, left, right, default_left, missing_zero,
    cover, leaf_cover, leaf_value, feat, zero, one, pw, stack, s_zero, s_one, nop, total, go,
    phi,
):  # fmt: skip
    """One tree's contributions for the rows xb [n_features, lanes] added to phi."""
    stack[0, 0] = 0  # node
    stack[0, 1] = 0  # unique depth
    stack[0, 2] = 0  # parent's path offset
    stack[0, 3] = -1  # feature of the split that led here
    s_zero[0] = 1.0
    for r in range(lanes):
        s_one[0, r] = 1.0
    sp = 1
    while sp > 0:
        sp -= 1
        node, depth, parent, feature = stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3]
        off = parent + depth
        for i in range(depth):
            feat[off + i] = feat[parent + i]
            zero[off + i] = zero[parent + i]
            for r in range(lanes):
                one[off + i, r] = one[parent + i, r]
                pw[off + i, r] = pw[parent + i, r]
        # ExtendPath
        zf = s_zero[sp]
        feat[off + depth] = feature
        zero[off + depth] = zf
        for r in range(lanes):
            one[off + depth, r] = s_one[sp, r]
            pw[off + depth, r] = 1.0 if depth == 0 else 0.0
        for i in range(depth - 1, -1, -1):
            for r in range(lanes):
                p = pw[off + i, r]
                pw[off + i + 1, r] += s_one[sp, r] * p * (i + 1) / (depth + 1.0)
                pw[off + i, r] = zf * p * (depth - i) / (depth + 1.0)
        if node < 0:
            _leaf(feat, zero, one, pw, off, depth, leaf_value[lb + ~node], lanes, nop, total, phi)
            continue
        g = nb + node
        f = split_feature[g]
        for r in range(lanes):
            v = xb[f, r]
            missing = np.isnan(v) or (missing_zero[g] and abs(v) <= ZERO_THRESHOLD)
            go[r] = default_left[g] if missing else v <= threshold[g]
        lc, rc = left[g], right[g]
        left_zero = (cover[nb + lc] if lc >= 0 else leaf_cover[lb + ~lc]) / cover[g]
        right_zero = (cover[nb + rc] if rc >= 0 else leaf_cover[lb + ~rc]) / cover[g]
        incoming_zero = 1.0
        for r in range(lanes):
            nop[r] = 1.0  # incoming one fraction, per lane
        path_index = 0
        while path_index <= depth and feat[off + path_index] != f:
            path_index += 1
        if path_index != depth + 1:  # split on this feature before: undo, then redo here
            incoming_zero = zero[off + path_index]
            for r in range(lanes):
                total[r] = one[off + path_index, r]
            _unwind(feat, zero, one, pw, off, depth, path_index, lanes, nop)
            for r in range(lanes):
                nop[r] = total[r]
            depth -= 1
        for child, child_zero, side in ((rc, right_zero, False), (lc, left_zero, True)):
            stack[sp, 0] = child
            stack[sp, 1] = depth + 1
            stack[sp, 2] = off
            stack[sp, 3] = f
            s_zero[sp] = child_zero * incoming_zero
            for r in range(lanes):
                s_one[sp, r] = nop[r] if go[r] == side else 0.0
            sp += 1


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
    n, m = x.shape
    if n == 0:
        return
    blocks = (n + MAX_LANES - 1) // MAX_LANES
    lanes = (n + blocks - 1) // blocks  # equal blocks: 10 rows are one block of 10, not 16 + 0
    size = (max_depth + 2) * (max_depth + 3) // 2
    frames = 2 * (max_depth + 2)
    feat = np.empty(size, np.int64)
    zero = np.empty(size, np.float64)
    one = np.empty((size, lanes), np.float64)
    pw = np.empty((size, lanes), np.float64)
    stack = np.empty((frames, 4), np.int64)
    s_zero = np.empty(frames, np.float64)
    s_one = np.empty((frames, lanes), np.float64)
    nop = np.empty(lanes, np.float64)
    total = np.empty(lanes, np.float64)
    go = np.empty(lanes, np.bool_)
    xb = np.empty((m, lanes), np.float64)
    phi = np.empty((m + 1, lanes), np.float64)
    for start in range(0, n, lanes):
        rows = min(lanes, n - start)
        for r in range(lanes):  # a short last block repeats its last row in the spare lanes
            src = start + min(r, rows - 1)
            for j in range(m):
                xb[j, r] = x[src, j]
        phi[:] = 0.0
        for t in range(node_offset.shape[0] - 1):
            _tree(
                xb, lanes, node_offset[t], leaf_offset[t], split_feature, threshold, left,
                right, default_left, missing_zero, cover, leaf_cover, leaf_value, feat, zero,
                one, pw, stack, s_zero, s_one, nop, total, go, phi,
            )  # fmt: skip
        for r in range(rows):
            for j in range(m):
                out[start + r, j] += phi[j, r]
