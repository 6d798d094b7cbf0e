"""LLVM IR text for a tree ensemble over int8 codes (app.scoring.compiler.bins).

Two kinds of function. `<prefix>_bin_blocks` turns packed float32 rows [n_blocks, n_features,
lanes] into codes [n_blocks, n_columns + 1, lanes]: per feature, a branch-free binary search of
its sorted thresholds, all lanes at once (the first halvings as a count of pivots below x, the
rest one gather each), then each of the feature's columns codes missing values its own way.
The trees then run as in codegen.py (one compare and one select per split, the leaf folded up
the tree), but on 32 codes per 256-bit vector, with every operand read whole from a table the
caller passes, pre-broadcast: a split is one compare with a memory operand and one blend
(`vpcmpgtb`, `vpblendvb` on AVX2) where float32 took a broadcast, two compares and two blends
per 16 rows.

Tables (pre-broadcast: entry i is `lanes` copies of one value): the split codes [splits], the
leaf numbers 0..max_leaves-1 of a tree; float64 leaf values as in codegen.py. Scores are summed
in tree order in float64, so they equal the reference scorer's bit for bit.

Entry points: `void <prefix>_score_blocks(i8* codes, double* out, i64 n_blocks, i8* split_codes,
i8* leaf_numbers, double* leaf_values)` and `void <prefix>_bin_blocks(float* x, i8* codes,
i64 n_blocks, float* thresholds, i32* meta)` (BinLayout.thresholds and BinLayout.meta()).
"""

from __future__ import annotations

import numpy as np

from app.scoring.compiler.bins import BinLayout
from app.scoring.compiler.codegen import (
    ENTRY,
    entry_function,
    single_leaf,
    spread_modules,
    tree_head,
    tree_name,
)
from app.scoring.compiler.gathers import gather, gather_declarations
from app.scoring.compiler.nodes import ZERO32, LoweredTree

BIN_ENTRY = "bin_blocks"
BIN_AND_SCORE = "bin_and_score"
PIVOT_LEVELS = 4  # a search's first halvings, done by counting pivots instead


def split_code_table(layout: BinLayout) -> np.ndarray:
    """iN [(splits + 1) * lanes]: each split's code, `lanes` times (one spare entry, so a
    model of single-leaf trees still hands the code a table)."""
    codes = np.concatenate([*layout.node_code, np.zeros(1, np.int64)])
    return np.repeat(codes.astype(layout.code.dtype), layout.code.lanes)


def leaf_number_table(layout: BinLayout, trees: list[LoweredTree]) -> np.ndarray:
    """iN [max leaves * lanes]: 0, 1, ... `lanes` times each (wrapping, read back unsigned)."""
    most = max((int(t.leaf_value.shape[0]) for t in trees), default=1)
    numbers = np.arange(most, dtype=np.int64).astype(np.uint64).astype(layout.code.dtype)
    return np.repeat(numbers, layout.code.lanes)


def _tree(
    tree: LoweredTree,
    layout: BinLayout,
    index: int,
    name: str,
    code_base: int,
    leaf_base: int,
    avx2: bool,
) -> str:
    lanes, ir = layout.code.lanes, layout.code.ir
    vc, vd = f"<{lanes} x {ir}>", f"<{lanes} x double>"
    lines = tree_head(name, lanes)
    if tree.num_nodes == 0:
        return single_leaf(lines, leaf_base, lanes)

    def vector(var: str, table: str, at: int) -> str:
        lines.append(f"  %{var}.p = getelementptr inbounds {ir}, ptr %{table}, i64 {at * lanes}")
        lines.append(f"  %{var} = load {vc}, ptr %{var}.p, align 1")
        return f"%{var}"

    loaded: set[int] = set()
    columns = layout.node_column[index]

    def operand(child: int) -> str:
        return vector(f"l{~child}", "num", ~child) if child < 0 else f"%s{child}"

    for node in tree.postorder():
        col = int(columns[node])
        if col not in loaded:
            loaded.add(col)
            vector(f"x{col}", "x", col)
        k = vector(f"k{node}", "thr", code_base + node)
        lines.append(f"  %c{node} = icmp sgt {vc} %x{col}, {k}")
        left = operand(int(tree.left[node]))
        right = operand(int(tree.right[node]))
        lines.append(f"  %s{node} = select <{lanes} x i1> %c{node}, {vc} {right}, {vc} {left}")
    lines.append(f"  %leaf = zext {vc} %s0 to <{lanes} x i32>")
    lines.append(f"  %base = getelementptr inbounds double, ptr %val, i64 {leaf_base}")
    values = gather(lines, "v", "double", "%base", "%leaf", lanes, avx2)
    lines.append(f"  ret {vd} {values}\n}}\n")
    return "\n".join(lines)


def _bin_function(prefix: str, layout: BinLayout, num_features: int, avx2: bool) -> str:
    """Codes for every column of every block (see the module docstring): a loop over blocks
    and, inside, over the used features (one body for all: a fully unrolled body per feature
    took LLVM ~7 s to compile for 136 features)."""
    code = layout.code
    lanes, ir = code.lanes, code.ir
    vf, vi, vc, vb = (f"<{lanes} x {t}>" for t in ("float", "i32", ir, "i1"))
    n_used, steps = len(layout.features), layout.steps
    width = (1 << steps) - 1
    levels = min(steps, PIVOT_LEVELS)
    stride = 1 << (steps - levels)
    lines = [
        f"define void @{prefix}_{BIN_ENTRY}(ptr noalias readonly %x, ptr noalias %codes, "
        "i64 %n_blocks, ptr noalias readonly %thr, ptr noalias readonly %meta) nounwind {",
        "entry:",
        "  %any = icmp sgt i64 %n_blocks, 0",
        f"  br i1 %any, label %{'block' if n_used else 'done'}, label %done",
    ]
    if n_used:
        lines += [
            "block:",
            "  %b = phi i64 [ 0, %entry ], [ %b.next, %block.end ]",
            f"  %xo = mul i64 %b, {num_features * lanes}",
            "  %xb = getelementptr inbounds float, ptr %x, i64 %xo",
            f"  %co = mul i64 %b, {layout.block_columns * lanes}",
            f"  %cb = getelementptr inbounds {ir}, ptr %codes, i64 %co",
            "  br label %feature",
            "feature:",
            "  %i = phi i64 [ 0, %block ], [ %i.next, %feature ]",
            "  %f.p = getelementptr inbounds i32, ptr %meta, i64 %i",
            "  %f.32 = load i32, ptr %f.p, align 4",
            "  %f = sext i32 %f.32 to i64",
            f"  %vo = mul i64 %f, {lanes}",
            "  %v.p = getelementptr inbounds float, ptr %xb, i64 %vo",
            f"  %v = load {vf}, ptr %v.p, align 4",
            f"  %to = mul i64 %i, {width}",
            "  %tb = getelementptr inbounds float, ptr %thr, i64 %to",
        ]
        # The search's first halvings as a count of the pivots below x (every stride-th
        # entry), compares with broadcasts where each halving would cost a gather.
        count = "zeroinitializer"
        for j in range((1 << levels) - 1):
            lines += [
                f"  %pv{j}.p = getelementptr inbounds float, ptr %tb, i64 {(j + 1) * stride - 1}",
                f"  %pv{j}.s = load float, ptr %pv{j}.p, align 4",
                f"  %pv{j}.i = insertelement {vf} poison, float %pv{j}.s, i64 0",
                f"  %pv{j} = shufflevector {vf} %pv{j}.i, {vf} poison, {vi} zeroinitializer",
                f"  %pc{j} = fcmp olt {vf} %pv{j}, %v",  # false for NaN x
                f"  %ps{j} = sext {vb} %pc{j} to {vi}",
                f"  %pn{j} = sub {vi} {count}, %ps{j}",
            ]
            count = f"%pn{j}"
        lines.append(f"  %q{steps - levels} = shl {vi} {count}, splat (i32 {steps - levels})")
        # The rest by halvings: the bin is the count of thresholds below x.
        for step in reversed(range(steps - levels)):
            pos, half = f"%q{step + 1}", 1 << step
            lines += [
                f"  %i{step} = add {vi} {pos}, splat (i32 {half - 1})",
            ]
            t = gather(lines, f"t{step}", "float", "%tb", f"%i{step}", lanes, avx2)
            lines += [
                f"  %u{step} = fcmp olt {vf} {t}, %v",
                f"  %a{step} = add {vi} {pos}, splat (i32 {half})",
                f"  %q{step} = select {vb} %u{step}, {vi} %a{step}, {vi} {pos}",
            ]
        lines += [
            f"  %n = trunc {vi} %q0 to {vc}",
            f"  %e = sub {vc} %n, splat ({ir} {code.bias})",
            f"  %nan = fcmp uno {vf} %v, %v",
            f"  %abs = call {vf} @llvm.fabs.v{lanes}f32({vf} %v)",
            f"  %z = fcmp ole {vf} %abs, splat (float {_float(ZERO32)})",
            f"  %mz = or {vb} %nan, %z",
        ]
        # One store per missing rule (rules.rule), into its column or the scratch one.
        for r, (missing, fill) in enumerate(
            (("%nan", code.low), ("%nan", code.high), ("%mz", code.low), ("%mz", code.high))
        ):
            lines += [
                f"  %r{r}.i = add i64 %i, {n_used + r * n_used}",
                f"  %r{r}.p = getelementptr inbounds i32, ptr %meta, i64 %r{r}.i",
                f"  %r{r}.c = load i32, ptr %r{r}.p, align 4",
                f"  %r{r}.w = sext i32 %r{r}.c to i64",
                f"  %r{r}.o = mul i64 %r{r}.w, {lanes}",
                f"  %r{r}.d = getelementptr inbounds {ir}, ptr %cb, i64 %r{r}.o",
                f"  %r{r} = select {vb} {missing}, {vc} splat ({ir} {fill}), {vc} %e",
                f"  store {vc} %r{r}, ptr %r{r}.d, align 1",
            ]
        lines += [
            "  %i.next = add i64 %i, 1",
            f"  %more.f = icmp slt i64 %i.next, {n_used}",
            "  br i1 %more.f, label %feature, label %block.end",
            "block.end:",
            "  %b.next = add i64 %b, 1",
            "  %more = icmp slt i64 %b.next, %n_blocks",
            "  br i1 %more, label %block, label %done",
        ]
    lines += ["done:", "  ret void", "}", ""]
    return "\n".join(lines)


def _bin_and_score(prefix: str) -> str:
    """Both entry points in one call of the scorers' six-argument shape, for another thread
    (app.scoring.beside) to bin its rows too: (float rows, out, n_blocks, codes scratch,
    tables: ptr [split codes, leaf numbers, leaf values, thresholds, meta], unused)."""
    lines = [
        f"define void @{prefix}_{BIN_AND_SCORE}(ptr %x, ptr %out, i64 %n_blocks, ptr %codes, "
        "ptr readonly %tables, ptr %unused) nounwind {",
        "entry:",
    ]
    names = ("k", "num", "val", "thr", "meta")
    for i, name in enumerate(names):
        lines.append(f"  %{name}.p = getelementptr inbounds ptr, ptr %tables, i64 {i}")
        lines.append(f"  %{name} = load ptr, ptr %{name}.p, align 8")
    lines += [
        f"  call void @{prefix}_{BIN_ENTRY}(ptr %x, ptr %codes, i64 %n_blocks, ptr %thr, "
        "ptr %meta)",
        f"  call void @{prefix}_{ENTRY}(ptr %codes, ptr %out, i64 %n_blocks, ptr %k, "
        "ptr %num, ptr %val)",
        "  ret void",
        "}",
        "",
    ]
    return "\n".join(lines)


def _float(value: float) -> str:
    """An IR float constant: LLVM spells float constants as the double's hex bits."""
    bits = int(np.float64(np.float32(value)).view(np.uint64))
    return f"0x{bits:016X}"


def gen_binned_modules(
    trees: list[LoweredTree],
    layout: BinLayout,
    num_features: int,
    *,
    prefix: str,
    chunk: int = 8,
    parts: int = 1,
    avx2: bool = False,
) -> list[str]:
    """IR modules as codegen.gen_modules makes them (part 0 holds both entry points).
    `avx2`: gather with AVX2's own instructions (the host has them; see _gather)."""
    lanes, ir = layout.code.lanes, layout.code.ir
    vf = f"<{lanes} x float>"
    header = [f"declare {vf} @llvm.fabs.v{lanes}f32({vf})", *gather_declarations(lanes, avx2), ""]

    def tree_ir(i: int, tree: LoweredTree, code_base: int, leaf_base: int) -> str:
        return _tree(tree, layout, i, tree_name(prefix, i), code_base, leaf_base, avx2)

    driver = [
        entry_function(prefix, len(trees), layout.block_columns * lanes, ir, lanes, chunk),
        _bin_function(prefix, layout, num_features, avx2),
        _bin_and_score(prefix),
    ]
    return spread_modules(
        trees, tree_ir, prefix=prefix, lanes=lanes, parts=parts, header=header, driver=driver
    )
