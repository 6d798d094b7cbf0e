"""Leaf-wise regression tree growth on binned features (the leaf with the largest gain splits
first, as LightGBM grows them; Burges 2010 for MART), with histogram subtraction and features
spread over threads."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numba import njit

from app.artifacts.tree_dump import Tree
from trainer.lambdamart.binning import BinMapper
from trainer.lambdamart.leaf_histograms import PARALLEL_WORK, ROW_WISE_SHARE, leaf_histograms
from trainer.lambdamart.split import HESS_EPS


@njit(cache=True, nogil=True)
def _grow(
    bins: np.ndarray,
    row_bins: np.ndarray,
    n_real: np.ndarray,
    grad: np.ndarray,
    hess: np.ndarray,
    rows: np.ndarray,
    feats: np.ndarray,
    num_leaves: int,
    limits: np.ndarray,
    pool: np.ndarray,
    order: np.ndarray,
    og: np.ndarray,
    oh: np.ndarray,
    tmp: np.ndarray,
    scratch: np.ndarray,
    n_threads: int,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Grows one tree over rows [n_in] (order[:n_in] ends up grouped by leaf).

    Returns (n_leaves, nodes int64 [num_leaves - 1, 5] = (feature, bin, default_left, left,
    right), leaf sums float64 [num_leaves, 2] = (grad, hess), leaf_start, leaf_count)."""
    n_in = rows.size
    min_data = limits[0]
    min_hess = limits[1]
    nodes = np.zeros((max(num_leaves - 1, 1), 5), dtype=np.int64)
    sums = np.zeros((num_leaves, 2))
    leaf_start = np.zeros(num_leaves, dtype=np.int64)
    leaf_count = np.zeros(num_leaves, dtype=np.int64)
    leaf_buf = np.zeros(num_leaves, dtype=np.int64)
    leaf_parent = np.full(num_leaves, -1, dtype=np.int64)
    leaf_is_left = np.zeros(num_leaves, dtype=np.bool_)
    best = np.full((num_leaves, 6), -np.inf)  # (gain, feature, bin, default_left, grad, hess)
    best_count = np.zeros(num_leaves)
    results = np.empty((2, feats.size, 6))
    g_total = 0.0
    h_total = 0.0
    for i in range(n_in):
        order[i] = rows[i]
        g_total += grad[rows[i]]
        h_total += hess[rows[i]]
    sums[0, 0] = g_total
    sums[0, 1] = h_total
    leaf_count[0] = n_in
    small = np.zeros(6)
    large = np.zeros(6)
    leaf_ids = np.zeros(2, dtype=np.int64)
    n_leaves = 1
    pending = True  # the children of the last split still need their best splits
    last_left = 0
    last_right = -1
    while True:
        if pending:
            a, b = last_left, last_right
            if b >= 0 and leaf_count[b] < leaf_count[a]:
                a, b = b, a
            leaf_ids[0] = a
            leaf_ids[1] = b
            for side in range(2):
                leaf = leaf_ids[side]
                spec = small if side == 0 else large
                if leaf < 0:
                    spec[0] = -1.0
                    continue
                spec[0] = leaf_buf[leaf]
                spec[1] = leaf_start[leaf]
                spec[2] = leaf_count[leaf]
                spec[3] = sums[leaf, 0]
                spec[4] = sums[leaf, 1]
                ok = leaf_count[leaf] >= 2 * min_data and sums[leaf, 1] >= 2 * min_hess
                spec[5] = 1.0 if ok else 0.0
            if small[5] != 0.0 or (b >= 0 and large[5] != 0.0):
                s0 = leaf_start[a]
                for p in range(s0, s0 + leaf_count[a]):
                    og[p] = grad[order[p]]
                    oh[p] = hess[order[p]]
                work = leaf_count[a] * feats.size
                blocks = min(n_threads, feats.size) if work >= PARALLEL_WORK else 1
                row_wise = leaf_count[a] <= scratch.shape[1]
                leaf_histograms(
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
                    blocks,
                )
            else:
                results[:, :, 0] = -np.inf
            for side in range(2):
                leaf = leaf_ids[side]
                if leaf < 0:
                    continue
                best[leaf, 0] = -np.inf
                for k in range(feats.size):
                    if results[side, k, 0] > best[leaf, 0]:
                        best[leaf, 0] = results[side, k, 0]
                        best[leaf, 1] = feats[k]
                        best[leaf, 2] = results[side, k, 1]
                        best[leaf, 3] = results[side, k, 2]
                        best[leaf, 4] = results[side, k, 3]
                        best[leaf, 5] = results[side, k, 4]
                        best_count[leaf] = results[side, k, 5]
        if n_leaves >= num_leaves:
            break
        chosen = -1
        top = 0.0
        for leaf in range(n_leaves):
            if best[leaf, 0] > top:
                top = best[leaf, 0]
                chosen = leaf
        if chosen < 0:
            break
        f = int(best[chosen, 1])
        t = int(best[chosen, 2])
        dl = best[chosen, 3] != 0.0
        start = leaf_start[chosen]
        count = leaf_count[chosen]
        column = bins[f]
        nan_bin = n_real[f]
        n_left = 0
        n_right = 0
        for p in range(start, start + count):
            r = order[p]
            v = column[r]
            if dl if v == nan_bin else v <= t:
                order[start + n_left] = r
                n_left += 1
            else:
                tmp[n_right] = r
                n_right += 1
        order[start + n_left : start + count] = tmp[:n_right]
        node = n_leaves - 1
        new = n_leaves
        nodes[node, 0] = f
        nodes[node, 1] = t
        nodes[node, 2] = 1 if dl else 0
        nodes[node, 3] = ~chosen
        nodes[node, 4] = ~new
        parent = leaf_parent[chosen]
        if parent >= 0:
            nodes[parent, 3 if leaf_is_left[chosen] else 4] = node
        leaf_parent[chosen] = node
        leaf_is_left[chosen] = True
        leaf_parent[new] = node
        leaf_is_left[new] = False
        leaf_start[new] = start + n_left
        leaf_count[new] = n_right
        leaf_count[chosen] = n_left
        sums[new, 0] = sums[chosen, 0] - best[chosen, 4]
        sums[new, 1] = sums[chosen, 1] - best[chosen, 5]
        sums[chosen, 0] = best[chosen, 4]
        sums[chosen, 1] = best[chosen, 5]
        # The larger child keeps the parent's histogram buffer (subtracted in place).
        parent_buf = leaf_buf[chosen]
        if n_left <= n_right:
            leaf_buf[chosen] = new
            leaf_buf[new] = parent_buf
        else:
            leaf_buf[new] = new
        n_leaves += 1
        last_left = chosen
        last_right = new
        pending = n_leaves < num_leaves
    return n_leaves, nodes, sums, leaf_start, leaf_count


@dataclass(frozen=True)
class GrownTree:
    """A tree on bins; leaves hold the rows order[leaf_start[l] : leaf_start[l] + leaf_count[l]]."""

    num_leaves: int
    nodes: np.ndarray  # int64 [num_leaves - 1, 5]: feature, bin, default_left, left, right
    sums: np.ndarray  # float64 [num_leaves, 2]: sum of lambdas, sum of hessians
    leaf_start: np.ndarray  # int64 [num_leaves]
    leaf_count: np.ndarray  # int64 [num_leaves]

    def leaf_values(self, learning_rate: float, lambda_l2: float) -> np.ndarray:
        """Newton steps gamma = learning_rate * sum(lambda) / (sum(hessian) + l2): [num_leaves]."""
        g = self.sums[: self.num_leaves, 0]
        h = self.sums[: self.num_leaves, 1] + lambda_l2
        safe = np.where(h > HESS_EPS, h, 1.0)
        return np.where(h > HESS_EPS, learning_rate * g / safe, 0.0)

    def to_tree(self, mapper: BinMapper, leaf_values: np.ndarray) -> Tree:
        """The dump form: thresholds as the real feature values of the bins' upper edges; covers
        are the training rows per leaf (LightGBM's leaf_count), for TreeSHAP."""
        nodes = self.nodes[: self.num_leaves - 1]
        thresholds = [mapper.threshold(int(f), int(b)) for f, b in nodes[:, :2]]
        return Tree(
            split_feature=nodes[:, 0].astype(np.int32),
            threshold=np.asarray(thresholds, dtype=np.float64),
            left=nodes[:, 3].astype(np.int32),
            right=nodes[:, 4].astype(np.int32),
            default_left=nodes[:, 2].astype(bool),
            leaf_value=np.asarray(leaf_values, dtype=np.float64),
        ).with_leaf_covers(self.leaf_count[: self.num_leaves])


class TreeLearner:
    """Grows trees on one binned training set; buffers are allocated once and reused."""

    def __init__(
        self,
        bins: np.ndarray,
        mapper: BinMapper,
        num_leaves: int,
        min_data_in_leaf: int,
        min_sum_hessian_in_leaf: float,
        lambda_l2: float,
    ) -> None:
        self.bins = bins  # uint8/uint16 [n_features, n_docs]
        self.row_bins = np.ascontiguousarray(bins.T)  # [n_docs, n_features]
        self.n_real = mapper.n_real
        n_docs = bins.shape[1]
        self.num_leaves = reachable_leaves(num_leaves, n_docs, min_data_in_leaf)
        self.limits = np.array([min_data_in_leaf, min_sum_hessian_in_leaf, lambda_l2], np.float64)
        # One histogram per leaf: sized by the leaves a tree can reach, not by the parameter.
        self.pool = np.zeros((self.num_leaves, mapper.num_features, mapper.bin_stride, 3))
        self.order = np.zeros(n_docs, dtype=np.int32)
        self.tmp = np.zeros(n_docs, dtype=np.int32)
        self.og = np.zeros(n_docs)
        self.oh = np.zeros(n_docs)
        # Bins of a thin leaf's rows, feature by feature (see build_gathered_histograms).
        self.scratch = np.zeros((mapper.num_features, int(ROW_WISE_SHARE * n_docs)), bins.dtype)
        self.zero_bin = unseen_nan_bins(bins, mapper)

    def grow(
        self, grad: np.ndarray, hess: np.ndarray, rows: np.ndarray, features: np.ndarray
    ) -> GrownTree:
        """A tree fitted to lambdas/hessians [n_docs] over rows int32 [n_in] (ascending), splitting
        only on features int64 [n_used] (ascending). `self.order[:n_in]` holds the leaves' rows."""
        n_leaves, nodes, sums, start, count = _grow(
            self.bins,
            self.row_bins,
            self.n_real,
            grad,
            hess,
            rows,
            features,
            self.num_leaves,
            self.limits,
            self.pool,
            self.order,
            self.og,
            self.oh,
            self.tmp,
            self.scratch,
            numba.get_num_threads(),
        )
        splits = nodes[: n_leaves - 1]
        zero = self.zero_bin[splits[:, 0]]
        never_missing = zero >= 0
        splits[never_missing, 2] = zero[never_missing] <= splits[never_missing, 1]
        return GrownTree(n_leaves, nodes, sums, start, count)


def reachable_leaves(num_leaves: int, n_docs: int, min_data_in_leaf: int) -> int:
    """The most leaves a tree over `n_docs` rows can have: every leaf keeps at least
    `min_data_in_leaf` rows, so no tree grows past n_docs // min_data_in_leaf leaves whatever
    `num_leaves` allows."""
    return min(num_leaves, max(2, n_docs // max(min_data_in_leaf, 1)))


def unseen_nan_bins(bins: np.ndarray, mapper: BinMapper) -> np.ndarray:
    """Per feature, the bin of 0.0 where the training data has no missing value, else -1:
    int64 [n_features]. A missing value at prediction then goes where 0.0 goes, as in LightGBM
    (missing_type None: NaN is read as 0). Sparse training files (LETOR, SVMlight) write 0 by
    leaving a feature out, and a request that leaves it out sends it missing: with NaN sent
    to the larger child instead, a model trained on such data scored absent features as
    something it never saw. Features with missing values in training keep the learned or
    larger-side direction."""
    has_nan = (bins == mapper.n_real[:, None]).any(axis=1)
    zero = mapper.transform(np.zeros((1, mapper.num_features), dtype=np.float32))[:, 0]
    return np.where(has_nan, -1, zero.astype(np.int64))
