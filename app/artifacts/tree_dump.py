"""The tree dump (`model.json`): a tree ensemble as flat parallel arrays.

Contract (see docs/ARCHITECTURE.md): node 0 is the root; `left[i]`/`right[i]` are child indices,
a negative child `c` is the leaf `~c`; `x[split_feature[i]] <= threshold[i]` goes left; NaN goes
left when `default_left[i]`; a threshold of +/-infinity is written as the string "Infinity" /
"-Infinity" (JSON has no infinities). A tree with no split has empty node arrays and one leaf value.
Optional `missing_zero[i]` (LightGBM's MissingType::Zero) makes |x| <= ZERO_THRESHOLD count as
missing too.
Optional `cover[i]` / `leaf_cover[j]` (both or neither): the training weight that reached each
node and leaf (LightGBM's internal_count/leaf_count, XGBoost's `cover` = hessian sums); only
explanations (TreeSHAP, app/explain/) need them, scoring never reads them.
The score of a row is `base_score + sum(tree leaf values)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from app.errors import LtrError

FORMAT = "ltr-tree-dump"
FORMAT_VERSION = 1
# LightGBM's kZeroThreshold, declared `const double kZeroThreshold = 1e-35f` (meta.h): the float
# literal widened, 1.0000000180025095e-35, not the double 1e-35.
ZERO_THRESHOLD = float(np.float32(1e-35))


class TreeDumpError(LtrError, ValueError):
    """A tree dump that does not follow the contract."""


@dataclass(frozen=True)
class Tree:
    split_feature: np.ndarray  # int32 [n_nodes]
    threshold: np.ndarray  # float64 [n_nodes]
    left: np.ndarray  # int32 [n_nodes]
    right: np.ndarray  # int32 [n_nodes]
    default_left: np.ndarray  # bool [n_nodes]
    leaf_value: np.ndarray  # float64 [n_leaves]
    missing_zero: np.ndarray | None = None  # bool [n_nodes] or None
    cover: np.ndarray | None = None  # float64 [n_nodes] or None (with leaf_cover)
    leaf_cover: np.ndarray | None = None  # float64 [n_leaves] or None (with cover)

    @property
    def num_nodes(self) -> int:
        return int(self.split_feature.shape[0])

    @property
    def num_leaves(self) -> int:
        return int(self.leaf_value.shape[0])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "split_feature": self.split_feature.tolist(),
            "threshold": _thresholds_to_json(self.threshold),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "default_left": self.default_left.tolist(),
            "leaf_value": self.leaf_value.tolist(),
        }
        if self.missing_zero is not None and bool(self.missing_zero.any()):
            out["missing_zero"] = self.missing_zero.tolist()
        if self.cover is not None and self.leaf_cover is not None:
            out["cover"] = self.cover.tolist()
            out["leaf_cover"] = self.leaf_cover.tolist()
        return out

    @property
    def has_covers(self) -> bool:
        """Node covers are known (a tree without splits needs none: its contributions are 0)."""
        return self.num_nodes == 0 or (self.cover is not None and self.leaf_cover is not None)

    def with_leaf_covers(self, leaf_cover: np.ndarray) -> Tree:
        """This tree with `leaf_cover` [n_leaves] and each node's cover the sum of its leaves'."""
        leaf_cover = np.asarray(leaf_cover, dtype=np.float64)
        cover = np.zeros(self.num_nodes, dtype=np.float64)
        # Children have larger indices than their parent in every dump we write, but a parent
        # pass that does not rely on it costs little: visit in reverse depth-first order.
        order: list[int] = []
        stack = [0] if self.num_nodes else []
        while stack:
            node = stack.pop()
            order.append(node)
            stack += [int(c) for c in (self.left[node], self.right[node]) if c >= 0]
        for node in reversed(order):
            cover[node] = sum(
                cover[c] if c >= 0 else leaf_cover[~c]
                for c in (int(self.left[node]), int(self.right[node]))
            )
        return replace(self, cover=cover, leaf_cover=leaf_cover)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], num_features: int, where: str) -> Tree:
        try:
            tree = cls(
                split_feature=np.asarray(raw["split_feature"], dtype=np.int32),
                threshold=_thresholds_from_json(raw["threshold"]),
                left=np.asarray(raw["left"], dtype=np.int32),
                right=np.asarray(raw["right"], dtype=np.int32),
                default_left=np.asarray(raw["default_left"], dtype=bool),
                leaf_value=np.asarray(raw["leaf_value"], dtype=np.float64),
                missing_zero=(
                    np.asarray(raw["missing_zero"], dtype=bool) if "missing_zero" in raw else None
                ),
                cover=np.asarray(raw["cover"], dtype=np.float64) if "cover" in raw else None,
                leaf_cover=(
                    np.asarray(raw["leaf_cover"], dtype=np.float64) if "leaf_cover" in raw else None
                ),
            )
        except KeyError as exc:
            raise TreeDumpError(f"{where}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise TreeDumpError(f"{where}: {exc}") from None
        tree.validate(num_features, where)
        return tree

    def validate(self, num_features: int, where: str = "tree") -> None:
        n = self.num_nodes
        arrays = {
            "threshold": self.threshold,
            "left": self.left,
            "right": self.right,
            "default_left": self.default_left,
        }
        if self.missing_zero is not None:
            arrays["missing_zero"] = self.missing_zero
        if (self.cover is None) != (self.leaf_cover is None):
            raise TreeDumpError(f"{where}: cover and leaf_cover come together")
        if self.cover is not None:
            arrays["cover"] = self.cover
        for name, arr in arrays.items():
            if arr.shape != (n,):
                raise TreeDumpError(f"{where}: {name} has {arr.shape[0]} entries, expected {n}")
        if self.leaf_cover is not None and self.leaf_cover.shape != self.leaf_value.shape:
            raise TreeDumpError(
                f"{where}: leaf_cover has {self.leaf_cover.shape[0]} entries, "
                f"expected {self.num_leaves}"
            )
        for covers in (self.cover, self.leaf_cover):
            if covers is not None and not np.all(np.isfinite(covers) & (covers >= 0)):
                raise TreeDumpError(f"{where}: covers must be finite and non-negative")
        if self.num_leaves != n + 1:
            raise TreeDumpError(
                f"{where}: {self.num_leaves} leaves for {n} splits, expected {n + 1}"
            )
        if not np.all(np.isfinite(self.leaf_value)):
            raise TreeDumpError(f"{where}: leaf values must be finite")
        if np.any(np.isnan(self.threshold)):
            raise TreeDumpError(f"{where}: NaN threshold")
        if n and (self.split_feature.min() < 0 or self.split_feature.max() >= num_features):
            raise TreeDumpError(f"{where}: split feature out of range [0, {num_features})")
        children = np.concatenate([self.left, self.right])
        internal = children[children >= 0]
        leaves = ~children[children < 0]
        if internal.size and (internal.min() < 1 or internal.max() >= n):
            raise TreeDumpError(f"{where}: child node index out of range")
        if leaves.size and leaves.max() >= self.num_leaves:
            raise TreeDumpError(f"{where}: leaf index out of range")
        # A proper binary tree: every non-root node and every leaf referenced exactly once.
        if np.unique(internal).size != internal.size or internal.size != max(n - 1, 0):
            raise TreeDumpError(f"{where}: nodes are not a tree")
        if np.unique(leaves).size != leaves.size or (n and leaves.size != self.num_leaves):
            raise TreeDumpError(f"{where}: leaves are not referenced exactly once")
        if n > 1 and not _all_reach_root(self.left, self.right):
            raise TreeDumpError(f"{where}: nodes are not a tree (some unreachable from the root)")
        if n > MAX_SPLITS:
            raise TreeDumpError(
                f"{where}: {n:,} splits; at most {MAX_SPLITS:,} (LightGBM's most leaves, less one)"
            )
        depth = _depth(self.left, self.right)
        if depth > MAX_DEPTH:
            raise TreeDumpError(
                f"{where}: {depth:,} splits deep; at most {MAX_DEPTH:,} (a chain of 200,000 "
                "splits took the compiler past 2 GB and its explanations minutes of CPU)"
            )


# Bounds on one tree, far beyond what the trainers write (LightGBM's num_leaves is at most
# 131,072; depth-wise trees of depth 20 have a million leaves): past them a dump is not a model
# to serve. A crafted chain of 200,000 splits passed validation, and its compile grew past 2 GB
# while TreeSHAP's tables (cost ~ leaves x depth^2) took minutes (a held-out security review).
MAX_SPLITS = 131_071
MAX_DEPTH = 1_024

# JSON has no infinities (orjson writes null, which reads back as NaN). LightGBM writes a
# threshold of inf for a split that sends every number left and only missing values right;
# those go into the dump as these strings.
INFINITE_THRESHOLDS = {"Infinity": np.inf, "-Infinity": -np.inf}


def _thresholds_to_json(threshold: np.ndarray) -> list[float | str]:
    return [
        v if math.isfinite(v) or math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        for v in threshold.tolist()
    ]


def _thresholds_from_json(raw: Any) -> np.ndarray:
    if isinstance(raw, list) and any(isinstance(v, str) for v in raw):
        try:
            raw = [INFINITE_THRESHOLDS[v] if isinstance(v, str) else v for v in raw]
        except KeyError as exc:
            raise ValueError(
                f'threshold {exc.args[0]!r} is not a number, "Infinity" or "-Infinity"'
            ) from None
    return np.asarray(raw, dtype=np.float64)


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """Splits on the longest path from the root to a leaf, for a valid tree (pointer jumping,
    as _all_reach_root: after k rounds `steps[i]` counts min(depth(i), 2^k) edges up)."""
    n = left.shape[0]
    if n == 0:
        return 0
    steps = (np.arange(n) != 0).astype(np.int64)
    up = _parents(left, right)
    for _ in range(int(n).bit_length()):
        steps = steps + steps[up]
        up = up[up]
    return int(steps.max()) + 1


def _all_reach_root(left: np.ndarray, right: np.ndarray) -> bool:
    """Whether every node's parent chain ends at node 0, for nodes each referenced exactly
    once. Then the nodes form one tree: no cycle, every node reachable from the root once.
    Pointer jumping: after k rounds `up[i]` is i's 2^k-th ancestor (the root is its own)."""
    up = _parents(left, right)
    for _ in range(int(left.shape[0]).bit_length()):
        up = up[up]
    return bool(np.all(up == 0))


def _parents(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Each node's parent, int64 [n] (the root, node 0, its own)."""
    parent = np.zeros(left.shape[0], dtype=np.int64)
    for children in (left, right):
        inner = children >= 0
        parent[children[inner]] = np.flatnonzero(inner)
    return parent


@dataclass(frozen=True)
class TreeEnsemble:
    num_features: int
    trees: list[Tree]
    base_score: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_covers(self) -> bool:
        """Every tree carries node covers (what TreeSHAP needs)."""
        return all(t.has_covers for t in self.trees)

    def to_json_bytes(self) -> bytes:
        doc = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "num_features": self.num_features,
            "base_score": self.base_score,
            "meta": self.meta,
            "trees": [t.to_dict() for t in self.trees],
        }
        return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)

    @classmethod
    def from_json_bytes(cls, data: bytes, where: str = "model.json") -> TreeEnsemble:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TreeDumpError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise TreeDumpError(f"{where}: not an {FORMAT} document")
        if doc.get("format_version") != FORMAT_VERSION:
            raise TreeDumpError(f"{where}: unsupported format_version {doc.get('format_version')}")
        num_features = doc.get("num_features")
        if not isinstance(num_features, int) or num_features < 1:
            raise TreeDumpError(f"{where}: num_features must be a positive integer")
        raw_trees = doc.get("trees")
        if not isinstance(raw_trees, list):
            raise TreeDumpError(f"{where}: trees must be a list")
        trees = [
            Tree.from_dict(t, num_features, f"{where}: tree {i}") for i, t in enumerate(raw_trees)
        ]
        base = doc.get("base_score", 0.0)
        if not isinstance(base, int | float) or not np.isfinite(base):
            raise TreeDumpError(f"{where}: base_score must be a finite number")
        return cls(num_features, trees, float(base), dict(doc.get("meta") or {}))
