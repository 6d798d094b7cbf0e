"""The IR the code generator emits, read as text: one compare and one select per split, the
missing-value rules as the tree dump states them, the tables' layout, and the split into parts."""

from __future__ import annotations

import re

import numpy as np

from app.scoring.compiler.codegen import ENTRY, build_tables, gen_modules
from app.scoring.compiler.nodes import ZERO32, LoweredTree


def _tree(default_left: list[bool], missing_zero: list[bool], base: float = 0.0) -> LoweredTree:
    """Node 0 splits on feature 2, node 1 (its left child) on feature 0; three leaves."""
    return LoweredTree(
        feature=np.array([2, 0], np.int32),
        threshold32=np.array([0.5, -1.0], np.float32),
        default_left=np.array(default_left),
        missing_zero=np.array(missing_zero),
        left=np.array([1, ~0], np.int32),
        right=np.array([~2, ~1], np.int32),
        leaf_value=np.array([base + 1.0, base + 2.0, base + 3.0]),
    )


def _stump(value: float) -> LoweredTree:
    empty = np.zeros(0, np.int32)
    return LoweredTree(
        feature=empty,
        threshold32=np.zeros(0, np.float32),
        default_left=np.zeros(0, bool),
        missing_zero=np.zeros(0, bool),
        left=empty,
        right=empty,
        leaf_value=np.array([value]),
    )


def _function(ir: str, name: str) -> str:
    start = ir.index(f"@{name}(")
    return ir[start : ir.index("\n}", start)]


def test_one_compare_and_one_select_per_split_children_first() -> None:
    (ir,) = gen_modules([_tree([True, False], [False, False])], num_features=3, prefix="m")
    body = _function(ir, "m_tree_0")
    assert len(re.findall(r"= fcmp ", body)) == 2
    assert len(re.findall(r"= select ", body)) == 2
    # node 1 (a child) is folded before node 0 (the root), whose select gives the leaf number
    assert body.index("%s1 = select") < body.index("%s0 = select")
    assert "getelementptr inbounds double, ptr %val, <16 x i32> %s0" in body
    # each feature column is loaded once, at its offset in the block (feature * lanes)
    assert "i64 32" in body and body.count("%x2 = load") == 1


def test_missing_direction_is_the_compare_predicate() -> None:
    # Unordered <= is true for NaN (missing goes left), ordered <= false (goes right).
    (ir,) = gen_modules([_tree([True, False], [False, False])], num_features=3, prefix="m")
    body = _function(ir, "m_tree_0")
    assert "%c0 = fcmp ule" in body and "%c1 = fcmp ole" in body
    assert "fabs" not in body


def test_zero_as_missing_tests_the_absolute_value_once_per_feature() -> None:
    (ir,) = gen_modules([_tree([True, False], [True, True])], num_features=3, prefix="m")
    body = _function(ir, "m_tree_0")
    assert body.count("call <16 x float> @llvm.fabs.v16f32") == 2  # features 2 and 0
    assert "%m0 = or <16 x i1> %c0, %z2" in body  # default left: missing or x <= t
    assert "%n1 = xor <16 x i1> %z0, splat (i1 true)" in body  # default right: not missing
    assert "%m1 = and <16 x i1> %c1, %n1" in body


def test_a_single_leaf_tree_is_a_broadcast_of_its_value() -> None:
    (ir,) = gen_modules([_stump(4.0)], num_features=1, prefix="m")
    body = _function(ir, "m_tree_0")
    assert "fcmp" not in body and "select" not in body
    assert "ptr %val, i64 0" in body


def test_tables_are_indexed_as_the_code_names_them() -> None:
    trees = [_tree([True, True], [False, False]), _stump(7.0), _tree([False, False], [True, True])]
    tables = build_tables(trees)
    assert tables.thresholds.dtype == np.float32 and tables.thresholds.shape == (5,)
    assert tables.thresholds[-1] == np.float32(ZERO32)  # the zero-as-missing bound, last
    np.testing.assert_array_equal(tables.thresholds[:4], [0.5, -1.0, 0.5, -1.0])
    np.testing.assert_array_equal(tables.leaf_numbers, np.arange(7))
    np.testing.assert_array_equal(tables.leaf_values, [1, 2, 3, 7, 1, 2, 3])
    (ir,) = gen_modules(trees, num_features=3, prefix="m")
    # tree 2's first threshold is table entry 3, its first leaf entry 4; the zero bound entry 4
    third = _function(ir, "m_tree_2")
    assert "ptr %thr, i64 3" in third and "ptr %num, i64 4" in third
    assert "ptr %thr, i64 4" in third


def test_parts_define_every_tree_once_and_the_driver_declares_the_rest() -> None:
    trees = [_tree([True, False], [False, False], base=float(i)) for i in range(6)]
    modules = gen_modules(trees, num_features=3, prefix="p", parts=3, chunk=4)
    assert len(modules) == 3
    defined = [set(re.findall(r"define fastcc <16 x double> @p_tree_(\d+)", m)) for m in modules]
    everywhere = [t for part in defined for t in part]
    assert sorted(everywhere, key=int) == [str(i) for i in range(6)]  # each exactly once
    assert all(defined), "each part gets trees"
    assert modules[0].count(f"define void @p_{ENTRY}(") == 1
    declared = set(re.findall(r"declare fastcc <16 x double> @p_tree_(\d+)", modules[0]))
    assert declared == set(everywhere) - defined[0]
    # the driver adds the trees in ensemble order, in chunks of 4
    calls = re.findall(r"call fastcc <16 x double> @p_tree_(\d+)", modules[0])
    assert calls == [str(i) for i in range(6)]
    assert "chunk1:" in modules[0] and "chunk2:" not in modules[0]
