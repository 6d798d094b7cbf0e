"""A tree ensemble as the flat arrays the TreeSHAP kernel walks, plus its expected value.

Built once per model (lazily, on the first explanation or by the warm-up) from the same tree
dump the scorer compiles, so explanations and scores make the same decisions. Everything that
does not depend on the row explained is computed here, once: the kernel only follows splits,
multiplies and adds (see app/explain/treeshap_kernel.py for the formulation).

Each tree's nodes and leaves become "vertices" in preorder (a parent before its children);
vertex v > 0 is reached from its parent by one edge. For that edge, with feature f split on:
- z: the share of the parent's training cover that goes to v (cover(v) / cover(parent));
- Z: the product of z over every edge on the path from the root down to v that splits on f
  (a feature split on several times along a path counts once, with its fractions multiplied:
  Lundberg et al. 2020, Alg. 2's unwind-and-extend);
- the ancestor: the nearest vertex above v whose incoming edge also splits on f (-1: none).
The kernel's per-edge factors at each quadrature point t follow from z, Z and the ancestor's
Z; it computes them as it goes (cheaper than reading them from memory: ~4 MB of tables for 500
trees x 63 leaves instead of ~16 MB).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from app.artifacts.tree_dump import Tree, TreeEnsemble
from app.errors import LtrError

NO_COVERS = (
    "explanations need node covers (training counts per node), which this model's tree dump "
    "lacks; re-export it with this version of `ltr train`, or convert it again with `ltr convert`"
)


class ExplainUnavailable(LtrError, ValueError):
    """The model cannot be explained (the message says why and what to do)."""


@dataclass(frozen=True)
class TreeTables:
    """Every tree's vertices concatenated: tree t owns vertices vertex_offset[t]:vertex_offset
    [t+1] (indices inside a tree are local to it) and integrates with the `quad_points[t]`-point
    rule: nodes quad_nodes[quad_points[t], :quad_points[t]], weights likewise."""

    num_features: int
    parent: np.ndarray  # int32 [V] local; -1 at the root
    child_left: np.ndarray  # int32 [V] local; -1 at a leaf
    child_right: np.ndarray  # int32 [V] local; -1 at a leaf
    is_left: np.ndarray  # bool [V]: v is its parent's left child
    feature: np.ndarray  # int32 [V]: the split feature of an internal vertex
    threshold: np.ndarray  # float64 [V]
    default_left: np.ndarray  # bool [V]
    missing_zero: np.ndarray  # bool [V]
    edge_feature: np.ndarray  # int32 [V]: the feature of the split that leads to v
    ancestor: np.ndarray  # int32 [V] local: the previous edge on the path with that feature
    edge_cover: np.ndarray  # float64 [V]: z of the edge into v
    big_z: np.ndarray  # float64 [V]: Z of the edge into v
    big_z_above: np.ndarray  # float64 [V]: Z of the ancestor's edge; 1.0 without one
    value: np.ndarray  # float64 [V]: the leaf value (0 at internal vertices)
    vertex_offset: np.ndarray  # int64 [n_trees + 1]
    quad_points: np.ndarray  # int64 [n_trees]
    quad_nodes: np.ndarray  # float64 [P + 1, P]: row p holds the p-point rule's nodes in (0, 1)
    quad_weights: np.ndarray  # float64 [P + 1, P]
    max_depth: int  # splits on the longest root-to-leaf path
    expected_value: float  # base_score + each tree's cover-weighted mean leaf value


def tree_depth(tree: Tree) -> int:
    """Splits on the longest root-to-leaf path (0 for a single leaf)."""
    if tree.num_nodes == 0:
        return 0
    deepest, stack = 0, [(0, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += [(int(c), depth + 1) for c in (tree.left[node], tree.right[node]) if c >= 0]
    return deepest


def tree_expected_value(tree: Tree) -> float:
    """E[tree(x)] over the training data: leaves weighted by cover / root cover (LightGBM's
    Tree::ExpectedValue, summed in leaf order as it does)."""
    if tree.num_nodes == 0:
        return float(tree.leaf_value[0])
    assert tree.cover is not None and tree.leaf_cover is not None
    total = float(tree.cover[0])
    value = 0.0
    for count, leaf in zip(tree.leaf_cover.tolist(), tree.leaf_value.tolist(), strict=True):
        value += (count / total) * leaf
    return value


@cache
def gauss_legendre(points: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes in (0, 1) and weights of the `points`-point Gauss-Legendre rule, exact for
    polynomials of degree <= 2 * points - 1."""
    x, w = np.polynomial.legendre.leggauss(points)
    return (x + 1.0) / 2.0, w / 2.0


@dataclass
class _Vertices:
    """One tree's vertices in preorder, as Python lists (turned into arrays per tree)."""

    code: list[int]  # dump index: >= 0 a node, < 0 the leaf ~code
    parent: list[int]
    is_left: list[bool]
    edge_feature: list[int]
    ancestor: list[int]
    z: list[float]  # edge's cover share
    big_z: list[float]  # Z of the edge
    big_z_above: list[float]  # Z of the ancestor's edge (1.0 without one: f(1) = 1)
    unique: int  # most distinct features on a root-to-leaf path


def _walk(tree: Tree) -> _Vertices:
    assert tree.cover is not None and tree.leaf_cover is not None
    cover, leaf_cover = tree.cover.tolist(), tree.leaf_cover.tolist()
    out = _Vertices([], [], [], [], [], [], [], [], 0)
    # (dump code, parent vertex, is left, {feature: (Z, vertex)} on the path above)
    stack: list[tuple[int, int, bool, dict[int, tuple[float, int]]]] = [(0, -1, False, {})]
    while stack:
        code, parent, left, path = stack.pop()
        v = len(out.code)
        out.code.append(code)
        out.parent.append(parent)
        out.is_left.append(left)
        if parent < 0:
            out.edge_feature.append(-1)
            out.ancestor.append(-1)
            out.z.append(1.0)
            out.big_z.append(1.0)
            out.big_z_above.append(1.0)
        else:
            node = out.code[parent]
            f = int(tree.split_feature[node])
            z = (cover[code] if code >= 0 else leaf_cover[~code]) / cover[node]
            above, ancestor = path.get(f, (1.0, -1))
            out.edge_feature.append(f)
            out.ancestor.append(ancestor)
            out.z.append(z)
            out.big_z.append(above * z)
            out.big_z_above.append(above)
            path = {**path, f: (above * z, v)}
        if code < 0:
            out.unique = max(out.unique, len(path))
            continue
        stack.append((int(tree.right[code]), v, False, path))
        stack.append((int(tree.left[code]), v, True, path))
    return out


def build_tables(ensemble: TreeEnsemble) -> TreeTables:
    """Flat arrays for the kernel; raises ExplainUnavailable when covers are missing or zero."""
    if not ensemble.has_covers:
        raise ExplainUnavailable(NO_COVERS)
    split = [t for t in ensemble.trees if t.num_nodes]
    for tree in split:
        assert tree.cover is not None
        if not tree.cover[0] > 0:
            raise ExplainUnavailable("a tree's root has zero cover: TreeSHAP is undefined for it")
    expected = ensemble.base_score
    for tree in ensemble.trees:
        expected += tree_expected_value(tree)

    columns: dict[str, list[np.ndarray]] = {}
    sizes, points = [], []
    for tree in split:
        walk = _walk(tree)
        code = np.array(walk.code, dtype=np.int64)
        internal = code >= 0
        node = np.where(internal, code, 0)
        leaf = np.where(internal, 0, ~code)
        local = np.arange(code.shape[0], dtype=np.int64)
        parent = np.array(walk.parent, dtype=np.int64)
        is_left = np.array(walk.is_left, dtype=np.bool_)
        child_left = np.full(code.shape[0], -1, dtype=np.int64)
        child_right = np.full(code.shape[0], -1, dtype=np.int64)
        child_left[parent[1:][is_left[1:]]] = local[1:][is_left[1:]]
        child_right[parent[1:][~is_left[1:]]] = local[1:][~is_left[1:]]
        missing_zero = tree.missing_zero
        if missing_zero is None:
            missing_zero = np.zeros(tree.num_nodes, dtype=np.bool_)
        q = max(1, (walk.unique + 1) // 2)
        per_vertex = {
            "parent": parent,
            "child_left": child_left,
            "child_right": child_right,
            "is_left": is_left,
            "feature": np.where(internal, tree.split_feature[node], 0),
            "threshold": np.where(internal, tree.threshold[node], 0.0),
            "default_left": np.where(internal, tree.default_left[node], False),
            "missing_zero": internal & missing_zero[node],
            "edge_feature": np.array(walk.edge_feature, dtype=np.int64),
            "ancestor": np.array(walk.ancestor, dtype=np.int64),
            "edge_cover": np.array(walk.z, dtype=np.float64),
            "big_z": np.array(walk.big_z, dtype=np.float64),
            "big_z_above": np.array(walk.big_z_above, dtype=np.float64),
            "value": np.where(internal, 0.0, tree.leaf_value[leaf]),
        }
        for name, array in per_vertex.items():
            columns.setdefault(name, []).append(array)
        sizes.append(code.shape[0])
        points.append(q)

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtype), *columns.get(name, [])]).astype(dtype)

    size = np.array(sizes, dtype=np.int64)
    most = max(points, default=1)
    quad_nodes = np.zeros((most + 1, most))
    quad_weights = np.zeros((most + 1, most))
    for p in range(1, most + 1):
        quad_nodes[p, :p], quad_weights[p, :p] = gauss_legendre(p)
    return TreeTables(
        num_features=ensemble.num_features,
        parent=cat("parent", np.int32),
        child_left=cat("child_left", np.int32),
        child_right=cat("child_right", np.int32),
        is_left=cat("is_left", np.bool_),
        feature=cat("feature", np.int32),
        threshold=cat("threshold", np.float64),
        default_left=cat("default_left", np.bool_),
        missing_zero=cat("missing_zero", np.bool_),
        edge_feature=cat("edge_feature", np.int32),
        ancestor=cat("ancestor", np.int32),
        edge_cover=cat("edge_cover", np.float64),
        big_z=cat("big_z", np.float64),
        big_z_above=cat("big_z_above", np.float64),
        value=cat("value", np.float64),
        vertex_offset=np.concatenate([[0], np.cumsum(size)]).astype(np.int64),
        quad_points=np.array(points, dtype=np.int64),
        quad_nodes=quad_nodes,
        quad_weights=quad_weights,
        max_depth=max((tree_depth(t) for t in split), default=0),
        expected_value=float(expected),
    )
