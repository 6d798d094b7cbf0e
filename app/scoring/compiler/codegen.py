"""LLVM IR text for a tree ensemble: every tree as branch-free SIMD code over a block of rows.

Branchy if/else code (lleaves' approach) pays a misprediction at most splits, because each row
takes its own path. Here each tree is a function over `lanes` rows at once: one vector compare per
split (the split's feature column against its threshold), then the leaf each row reaches is
folded up the tree with one vector select per split. That is n_splits compares instead of about
log2(n_leaves), but 16 rows wide and with nothing to mispredict, which wins for the 31-255-leaf
trees LambdaMART makes. The select works on int32 global leaf numbers (one register per 16 rows,
half the work of selecting float64 values); one gather per tree then fetches the leaf values.

Constants live in tables the caller passes (never in the code): float32 thresholds, int32 leaf
numbers and float64 leaf values. The code then holds no relocations, which keeps it small and
safe to place anywhere in memory.

Input layout (packed by the caller): float32 [n_blocks, n_features, lanes], so a split's feature
for one block of rows is one contiguous vector at a constant offset. Output: float64
[n_blocks * lanes], filled by the caller with base_score; each tree's leaf value is added in
ensemble order in float64, so the sums equal the reference scorer's bit for bit.

Entry point: `void <prefix>_score_blocks(float* x, double* out, i64 n_blocks,
float* thresholds, i32* leaf_numbers, double* leaf_values)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.scoring.compiler.gathers import gather, gather_declarations
from app.scoring.compiler.nodes import ZERO32, LoweredTree

ENTRY = "score_blocks"


@dataclass(frozen=True)
class Tables:
    """The constants the generated code reads; index i of each table is what the code names."""

    thresholds: np.ndarray  # float32 [total splits + 1]; the last entry is ZERO32
    leaf_numbers: np.ndarray  # int32 [total leaves]: i at i (the select's operands)
    leaf_values: np.ndarray  # float64 [total leaves]


def build_tables(trees: list[LoweredTree]) -> Tables:
    thresholds = np.concatenate([t.threshold32 for t in trees] + [np.array([ZERO32], np.float32)])
    leaf_values = np.concatenate([t.leaf_value for t in trees]).astype(np.float64)
    return Tables(
        thresholds=np.ascontiguousarray(thresholds, dtype=np.float32),
        leaf_numbers=np.arange(leaf_values.shape[0], dtype=np.int32),
        leaf_values=np.ascontiguousarray(leaf_values),
    )


def splat(lines: list[str], name: str, elem: str, table: str, index: int, lanes: int) -> str:
    """Emit a broadcast of table[index] into `%name`; returns the vector's IR name."""
    lines.append(f"  %{name}.p = getelementptr inbounds {elem}, ptr %{table}, i64 {index}")
    lines.append(f"  %{name}.s = load {elem}, ptr %{name}.p, align 4")
    lines.append(f"  %{name}.i = insertelement <{lanes} x {elem}> poison, {elem} %{name}.s, i64 0")
    lines.append(
        f"  %{name} = shufflevector <{lanes} x {elem}> %{name}.i, <{lanes} x {elem}> poison, "
        f"<{lanes} x i32> zeroinitializer"
    )
    return f"%{name}"


def tree_name(prefix: str, index: int) -> str:
    return f"{prefix}_tree_{index}"


def tree_head(name: str, lanes: int) -> list[str]:
    """A tree function's first lines: (x, split table, leaf numbers, leaf values) → scores."""
    return [
        f"define fastcc <{lanes} x double> @{name}(ptr noalias readonly %x, ptr noalias "
        "readonly %thr, ptr noalias readonly %num, ptr noalias readonly %val) "
        "noinline nounwind {\nentry:"
    ]


def single_leaf(lines: list[str], leaf_base: int, lanes: int) -> str:
    """The rest of a tree without splits: its one leaf value for every row."""
    leaf = splat(lines, "leaf", "double", "val", leaf_base, lanes)
    lines.append(f"  ret <{lanes} x double> {leaf}\n}}\n")
    return "\n".join(lines)


def _gen_tree(
    tree: LoweredTree,
    name: str,
    thr_base: int,
    leaf_base: int,
    zero_slot: int,
    lanes: int,
    avx2: bool,
) -> str:
    vf, vi, vd = f"<{lanes} x float>", f"<{lanes} x i32>", f"<{lanes} x double>"
    lines = tree_head(name, lanes)
    if tree.num_nodes == 0:
        return single_leaf(lines, leaf_base, lanes)

    loaded: set[int] = set()
    zero_tested: set[int] = set()

    def operand(child: int) -> str:
        if child < 0:
            return splat(lines, f"l{~child}", "i32", "num", leaf_base + ~child, lanes)
        return f"%s{child}"

    for node in tree.postorder():
        feat = int(tree.feature[node])
        if feat not in loaded:
            loaded.add(feat)
            lines.append(f"  %x{feat}.p = getelementptr inbounds float, ptr %x, i64 {feat * lanes}")
            lines.append(f"  %x{feat} = load {vf}, ptr %x{feat}.p, align 4")
        thr = splat(lines, f"t{node}", "float", "thr", thr_base + node, lanes)
        default_left = bool(tree.default_left[node])
        # Unordered `<=` is also true for NaN (missing goes left); ordered is false (goes right).
        pred = "ule" if default_left else "ole"
        lines.append(f"  %c{node} = fcmp {pred} {vf} %x{feat}, {thr}")
        cond = f"%c{node}"
        if tree.missing_zero[node]:
            if feat not in zero_tested:
                zero_tested.add(feat)
                zero = splat(lines, f"z{feat}.t", "float", "thr", zero_slot, lanes)
                lines.append(f"  %z{feat}.a = call {vf} @llvm.fabs.v{lanes}f32({vf} %x{feat})")
                lines.append(f"  %z{feat} = fcmp ole {vf} %z{feat}.a, {zero}")
            vb = f"<{lanes} x i1>"
            if default_left:
                lines.append(f"  %m{node} = or {vb} %c{node}, %z{feat}")
            else:
                lines.append(f"  %n{node} = xor {vb} %z{feat}, splat (i1 true)")
                lines.append(f"  %m{node} = and {vb} %c{node}, %n{node}")
            cond = f"%m{node}"
        left = operand(int(tree.left[node]))
        right = operand(int(tree.right[node]))
        lines.append(f"  %s{node} = select <{lanes} x i1> {cond}, {vi} {left}, {vi} {right}")
    values = gather(lines, "v", "double", "%val", "%s0", lanes, avx2)
    lines.append(f"  ret {vd} {values}\n}}\n")
    return "\n".join(lines)


def entry_function(
    prefix: str, n_trees: int, block_elems: int, elem: str, lanes: int, chunk: int
) -> str:
    """The driver: for each chunk of trees, every block of `block_elems` `elem`s, the chunk's
    trees' values added to the block's scores in order."""
    vd = f"<{lanes} x double>"
    lines = [
        f"define void @{prefix}_{ENTRY}(ptr noalias readonly %x, ptr noalias %out, i64 %n_blocks, "
        "ptr noalias readonly %thr, ptr noalias readonly %num, ptr noalias readonly %val) "
        "nounwind {",
        "entry:",
        "  %any = icmp sgt i64 %n_blocks, 0",
        "  br i1 %any, label %chunk0.pre, label %done",
    ]
    starts = list(range(0, n_trees, chunk))
    for ci, start in enumerate(starts):
        nxt = f"chunk{ci + 1}.pre" if ci + 1 < len(starts) else "done"
        lines += [
            f"chunk{ci}.pre:",
            f"  br label %chunk{ci}",
            f"chunk{ci}:",
            f"  %b{ci} = phi i64 [ 0, %chunk{ci}.pre ], [ %b{ci}.next, %chunk{ci} ]",
            f"  %xo{ci} = mul i64 %b{ci}, {block_elems}",
            f"  %xp{ci} = getelementptr inbounds {elem}, ptr %x, i64 %xo{ci}",
            f"  %oo{ci} = mul i64 %b{ci}, {lanes}",
            f"  %op{ci} = getelementptr inbounds double, ptr %out, i64 %oo{ci}",
            f"  %a{ci}.0 = load {vd}, ptr %op{ci}, align 8",
        ]
        acc = f"%a{ci}.0"
        for k in range(start, min(start + chunk, n_trees)):
            lines.append(
                f"  %r{k} = call fastcc {vd} @{tree_name(prefix, k)}(ptr %xp{ci}, ptr %thr, "
                "ptr %num, ptr %val)"
            )
            lines.append(f"  %a{ci}.{k + 1} = fadd {vd} {acc}, %r{k}")
            acc = f"%a{ci}.{k + 1}"
        lines += [
            f"  store {vd} {acc}, ptr %op{ci}, align 8",
            f"  %b{ci}.next = add i64 %b{ci}, 1",
            f"  %more{ci} = icmp slt i64 %b{ci}.next, %n_blocks",
            f"  br i1 %more{ci}, label %chunk{ci}, label %{nxt}",
        ]
    lines += ["done:", "  ret void", "}", ""]
    return "\n".join(lines)


# One tree's IR: (index, tree, its first split's and first leaf's global numbers) → text.
TreeIR = Callable[[int, LoweredTree, int, int], str]


def spread_modules(
    trees: list[LoweredTree],
    tree_ir: TreeIR,
    *,
    prefix: str,
    lanes: int,
    parts: int,
    header: list[str],
    driver: list[str],
) -> list[str]:
    """The tree functions `<prefix>_tree_<i>` spread over `parts` modules with about equal
    numbers of splits (the loader links them), each module after `header`; part 0 also holds
    the declarations of the others' trees and `driver`."""
    vd = f"<{lanes} x double>"
    total = max(sum(t.num_nodes + 1 for t in trees), 1)
    bodies: list[list[str]] = [[] for _ in range(max(parts, 1))]
    defined: list[set[int]] = [set() for _ in bodies]
    split_base = leaf_base = done = 0
    for i, tree in enumerate(trees):
        part = min(done * len(bodies) // total, len(bodies) - 1)
        bodies[part].append(tree_ir(i, tree, split_base, leaf_base))
        defined[part].add(i)
        done += tree.num_nodes + 1
        split_base += tree.num_nodes
        leaf_base += int(tree.leaf_value.shape[0])
    signature = f"fastcc {vd} @{{}}(ptr, ptr, ptr, ptr)"
    externs = [
        "declare " + signature.format(tree_name(prefix, i))
        for i in range(len(trees))
        if i not in defined[0]
    ]
    bodies[0] += [*externs, "", *driver]
    return ["\n".join(header + body) for body in bodies]


def gen_modules(
    trees: list[LoweredTree],
    num_features: int,
    *,
    prefix: str,
    lanes: int = 16,
    chunk: int = 8,
    parts: int = 1,
    avx2: bool = False,
) -> list[str]:
    """IR modules for an ensemble, to compile separately (in parallel) and load together.

    Part 0 holds `<prefix>_score_blocks`, the driver, which walks trees in chunks of `chunk`
    (their code stays in the instruction cache) and, for each chunk, every block of rows, adding
    the chunk's trees to the block's scores in order. The tree functions `<prefix>_tree_<i>` are
    spread over `parts` modules with about equal numbers of splits; the loader links them.
    `prefix` keeps the symbols of models loaded side by side apart. `avx2`: gather leaf
    values with AVX2's own instructions (app.scoring.compiler.gathers).
    """
    vf = f"<{lanes} x float>"
    header = [f"declare {vf} @llvm.fabs.v{lanes}f32({vf})", *gather_declarations(lanes, avx2), ""]
    zero_slot = sum(t.num_nodes for t in trees)

    def tree_ir(i: int, tree: LoweredTree, thr_base: int, leaf_base: int) -> str:
        return _gen_tree(tree, tree_name(prefix, i), thr_base, leaf_base, zero_slot, lanes, avx2)

    driver = entry_function(prefix, len(trees), num_features * lanes, "float", lanes, chunk)
    return spread_modules(
        trees, tree_ir, prefix=prefix, lanes=lanes, parts=parts, header=header, driver=[driver]
    )
