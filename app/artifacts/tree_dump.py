"""The tree dump (`model.json`): a tree ensemble as flat parallel arrays.

Contract (see docs/ARCHITECTURE.md): node 0 is the root; `left[i]`/`right[i]` are child indices,
a negative child `c` is the leaf `~c`; `x[split_feature[i]] <= threshold[i]` goes left; NaN goes
left when `default_left[i]`. A tree with no split has empty node arrays and one leaf value.
Optional `missing_zero[i]` (LightGBM's MissingType::Zero) makes |x| <= ZERO_THRESHOLD count as
missing too.
The score of a row is `base_score + sum(tree leaf values)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

    @property
    def num_nodes(self) -> int:
        return int(self.split_feature.shape[0])

    @property
    def num_leaves(self) -> int:
        return int(self.leaf_value.shape[0])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "split_feature": self.split_feature.tolist(),
            "threshold": self.threshold.tolist(),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "default_left": self.default_left.tolist(),
            "leaf_value": self.leaf_value.tolist(),
        }
        if self.missing_zero is not None and bool(self.missing_zero.any()):
            out["missing_zero"] = self.missing_zero.tolist()
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any], num_features: int, where: str) -> Tree:
        try:
            tree = cls(
                split_feature=np.asarray(raw["split_feature"], dtype=np.int32),
                threshold=np.asarray(raw["threshold"], dtype=np.float64),
                left=np.asarray(raw["left"], dtype=np.int32),
                right=np.asarray(raw["right"], dtype=np.int32),
                default_left=np.asarray(raw["default_left"], dtype=bool),
                leaf_value=np.asarray(raw["leaf_value"], dtype=np.float64),
                missing_zero=(
                    np.asarray(raw["missing_zero"], dtype=bool) if "missing_zero" in raw else None
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
        for name, arr in arrays.items():
            if arr.shape != (n,):
                raise TreeDumpError(f"{where}: {name} has {arr.shape[0]} entries, expected {n}")
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


def _all_reach_root(left: np.ndarray, right: np.ndarray) -> bool:
    """Whether every node's parent chain ends at node 0, for nodes each referenced exactly
    once. Then the nodes form one tree: no cycle, every node reachable from the root once.
    Pointer jumping: after k rounds `up[i]` is i's 2^k-th ancestor (the root is its own)."""
    n = left.shape[0]
    parent = np.zeros(n, dtype=np.int64)
    for children in (left, right):
        inner = children >= 0
        parent[children[inner]] = np.flatnonzero(inner)
    up = parent
    for _ in range(int(n).bit_length()):
        up = up[up]
    return bool(np.all(up == 0))


@dataclass(frozen=True)
class TreeEnsemble:
    num_features: int
    trees: list[Tree]
    base_score: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

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
