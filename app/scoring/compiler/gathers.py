"""Vector gathers in LLVM IR: the portable intrinsic, or AVX2's own instructions.

LLVM turns its portable gather into one scalar load per lane on AMD's Zen cores (its cost model
rates their gather instructions slow); in the tree scorers that cost more than all the
compares: 1,000 rows of a 500 x 63 model scored in 1.66 ms with AVX2's gathers against 2.0 ms
with LLVM's (int8 codes, one thread, a Zen 3 VM).
"""

from __future__ import annotations

# AVX2's gathers by element type: (intrinsic, elements per instruction, its mask).
_AVX2_GATHER = {
    "double": ("llvm.x86.avx2.gather.d.pd.256", 4, "splat (double -0.0)"),
    "float": ("llvm.x86.avx2.gather.d.ps.256", 8, "splat (float -0.0)"),
}


def gather(
    lines: list[str], tag: str, elem: str, base: str, index: str, lanes: int, avx2: bool
) -> str:
    """`<lanes x elem>` read at `base` + `index` (<lanes x i32>, in elements), appended to
    `lines` as `%tag...`; returns the result's IR name. `avx2`: with AVX2's own gathers."""
    if not avx2:
        lines.append(
            f"  %{tag}.p = getelementptr inbounds {elem}, ptr {base}, <{lanes} x i32> {index}"
        )
        vector = f"<{lanes} x {elem}>"
        lines.append(
            f"  %{tag} = call {vector} @llvm.masked.gather.v{lanes}{_short(elem)}.v{lanes}p0("
            f"<{lanes} x ptr> %{tag}.p, i32 {_size(elem)}, <{lanes} x i1> splat (i1 true), "
            f"{vector} poison)"
        )
        return f"%{tag}"
    intrinsic, width, mask = _AVX2_GATHER[elem]
    vw = f"<{width} x {elem}>"
    parts = []
    for q in range(lanes // width):
        pick = ", ".join(f"i32 {width * q + j}" for j in range(width))
        lines.append(
            f"  %{tag}.i{q} = shufflevector <{lanes} x i32> {index}, <{lanes} x i32> poison, "
            f"<{width} x i32> <{pick}>"
        )
        lines.append(
            f"  %{tag}.g{q} = call {vw} @{intrinsic}({vw} zeroinitializer, ptr {base}, "
            f"<{width} x i32> %{tag}.i{q}, {vw} {mask}, i8 {_size(elem)})"
        )
        parts.append(f"%{tag}.g{q}")
    size = width
    while len(parts) > 1:  # concatenated pairwise back into one <lanes x elem>
        pick = ", ".join(f"i32 {j}" for j in range(2 * size))
        joined = []
        for j in range(0, len(parts), 2):
            name = f"%{tag}.c{size}.{j}"
            lines.append(
                f"  {name} = shufflevector <{size} x {elem}> {parts[j]}, <{size} x {elem}> "
                f"{parts[j + 1]}, <{2 * size} x i32> <{pick}>"
            )
            joined.append(name)
        parts, size = joined, size * 2
    return parts[0]


def _short(elem: str) -> str:
    return {"double": "f64", "float": "f32"}[elem]


def _size(elem: str) -> int:
    return {"double": 8, "float": 4}[elem]


def gather_declarations(lanes: int, avx2: bool) -> list[str]:
    """The declarations _gather's calls need."""
    if avx2:
        return [
            f"declare <{w} x {e}> @{name}(<{w} x {e}>, ptr, <{w} x i32>, <{w} x {e}>, i8)"
            for e, (name, w, _) in _AVX2_GATHER.items()
        ]
    return [
        f"declare <{lanes} x {e}> @llvm.masked.gather.v{lanes}{_short(e)}.v{lanes}p0("
        f"<{lanes} x ptr>, i32, <{lanes} x i1>, <{lanes} x {e}>)"
        for e in _AVX2_GATHER
    ]
