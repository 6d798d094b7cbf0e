"""Thresholds → small integer bins, so each split compares bytes, not floats.

A split sends x left when `x <= t` (float32, app.scoring.compiler.nodes). Take a feature's
distinct split thresholds, sorted: t_0 < t_1 < ... < t_{T-1}. The bin of x is how many of them
lie below it, `bin(x) = #{j : t_j < x}`; then `x <= t_k` exactly when `bin(x) <= k` (if x <= t_k
no t_j with j >= k lies below x; if bin(x) <= k then t_k is not below x). So the bins make the
same decisions as the floats, for every float32 including infinities, signed zeros and
subnormals; only missing values need their own codes.

A missing value goes the split's default way. Each (feature, missing rule) pair a tree uses gets
its own column of codes: missing is NaN, or NaN and |x| <= ZERO32 where LightGBM's
missing-as-zero applies (`missing_zero`); a column for default-left splits codes it as bin 0
(left at every split: 0 <= k), one for default-right splits as the highest code (right at
every split: above every k). A split then only asks `code > k` (signed) to go right, which 32
rows answer in one vector compare of int8 codes, where float32 compares took two vector
compares per 16 rows on AVX2.

Codes are `bin - 128`, so int8 holds bins 0..255: every threshold of a model trained on at most
256 histogram bins per feature (255 by default in LightGBM and in our trainer, 256 in
XGBoost). A model with more distinct thresholds on one feature, or more than 256 leaves in one
tree, keeps float compares: int16 codes (16 rows a vector) were measured no faster than them
once their binning is paid (500 random depth-6 trees, ~230 thresholds a feature).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.scoring.compiler.nodes import LoweredTree


@dataclass(frozen=True)
class CodeType:
    """An integer code type: its IR name, numpy dtype, rows per vector block and range."""

    ir: str  # the IR integer type
    dtype: type[np.signedinteger]
    lanes: int  # rows per block: one 256-bit vector

    @property
    def bias(self) -> int:  # code = bin - bias
        return -self.low

    @property
    def low(self) -> int:  # bin 0's code; missing where it goes left
        return int(np.iinfo(self.dtype).min)

    @property
    def high(self) -> int:  # missing where it goes right: above every split's code
        return int(np.iinfo(self.dtype).max)

    @property
    def max_thresholds(self) -> int:
        """Most distinct thresholds per feature: bins 0..T code within [low, high]."""
        return self.high + self.bias

    @property
    def max_leaves(self) -> int:
        """Most leaves per tree: leaf numbers are selected as codes, read back unsigned."""
        return 1 << (8 * np.dtype(self.dtype).itemsize)


INT8 = CodeType("i8", np.int8, 32)


@dataclass(frozen=True)
class Column:
    """One column of codes: a feature under one missing rule."""

    feature: int
    missing_zero: bool
    default_left: bool


# A column's missing rule as an index: 2 * missing_zero + default right.
RULES = 4


def rule(column: Column) -> int:
    return 2 * column.missing_zero + (not column.default_left)


@dataclass(frozen=True)
class BinLayout:
    """How rows become codes, and what each split compares.

    `features`: int32 [n_used], the features some split uses. `thresholds`: float32 [n_used,
    2**steps - 1], row i the sorted distinct thresholds of features[i] padded with +inf (a
    branch-free binary search's table; one width for all, so the binning code is one loop).
    `columns`: the code columns, in a block's order; a block has one more, never read, where
    `feature_columns` [n_used, RULES] points the rules a feature is not split with.
    Per tree and node, `node_column` is the column a split reads and `node_code` the code
    `k - bias` it compares against.
    """

    code: CodeType
    steps: int
    features: np.ndarray  # int32 [n_used]
    thresholds: np.ndarray  # float32 [n_used, 2**steps - 1]
    columns: tuple[Column, ...]
    feature_columns: np.ndarray  # int32 [n_used, RULES]
    node_column: list[np.ndarray]  # per tree: int32 [n_nodes]
    node_code: list[np.ndarray]  # per tree: int64 [n_nodes]

    @property
    def block_columns(self) -> int:
        """Columns per block, the scratch one included."""
        return len(self.columns) + 1

    def meta(self) -> np.ndarray:
        """int32 [(1 + RULES) * n_used]: the binning code's table, the features and then, rule
        by rule, each feature's column."""
        return np.concatenate([self.features, self.feature_columns.T.ravel()]).astype(np.int32)


def bin_layout(trees: list[LoweredTree], num_features: int) -> BinLayout | None:
    """int8 codes when their bins hold every feature's thresholds and their leaf numbers
    every tree's leaves; None otherwise (float compares then). Numpy over all splits at
    once: a model is laid out on every load, compiled object cached or not."""
    sizes = [t.num_nodes for t in trees]
    feats = np.concatenate([t.feature for t in trees]) if trees else np.zeros(0, np.int32)
    thr = np.concatenate([t.threshold32 for t in trees]) if trees else np.zeros(0, np.float32)
    order = np.lexsort((thr, feats))
    sorted_feats, sorted_thr = feats[order], thr[order]
    per_feature: dict[int, np.ndarray] = {}
    bins = np.empty(len(feats), dtype=np.int64)  # each split's k: its threshold's rank
    for f in np.unique(feats).tolist():
        lo, hi = np.searchsorted(sorted_feats, [f, f + 1])
        # np.unique treats -0.0 and 0.0 as one value, as a float compare does.
        per_feature[f] = np.unique(sorted_thr[lo:hi])
        bins[order[lo:hi]] = np.searchsorted(per_feature[f], sorted_thr[lo:hi])
    most_thresholds = max((len(t) for t in per_feature.values()), default=0)
    most_leaves = max((int(t.leaf_value.shape[0]) for t in trees), default=1)
    code = INT8
    if most_thresholds > code.max_thresholds or most_leaves > code.max_leaves:
        return None
    steps = most_thresholds.bit_length()
    used = sorted(per_feature)
    table = np.full((len(used), (1 << steps) - 1), np.inf, dtype=np.float32)
    for i, f in enumerate(used):
        table[i, : len(per_feature[f])] = per_feature[f]
    # Columns numbered in the order their (feature, missing rule) first appears, split by split.
    if trees:
        mz = np.concatenate([t.missing_zero for t in trees]).astype(np.int64)
        right = ~np.concatenate([t.default_left for t in trees]).astype(bool)
    else:
        mz, right = np.zeros(0, np.int64), np.zeros(0, bool)
    keys = feats.astype(np.int64) * RULES + 2 * mz + right
    unique_keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first, kind="stable")
    number = np.empty(len(unique_keys), dtype=np.int32)
    number[by_appearance] = np.arange(len(unique_keys), dtype=np.int32)
    columns = tuple(
        Column(int(key) // RULES, bool(key % RULES >= 2), not key % 2)
        for key in unique_keys[by_appearance].tolist()
    )
    cuts = np.cumsum(sizes)[:-1]
    row = {f: i for i, f in enumerate(used)}
    feature_columns = np.full((len(used), RULES), len(columns), dtype=np.int32)
    for j, column in enumerate(columns):
        feature_columns[row[column.feature], rule(column)] = j
    return BinLayout(
        code,
        steps,
        np.asarray(used, dtype=np.int32),
        table,
        columns,
        feature_columns,
        np.split(number[inverse.ravel()], cuts),
        np.split(bins - code.bias, cuts),
    )
