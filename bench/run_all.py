"""Run every benchmark one after another (they compete for the same 2 cores otherwise), then
assemble BENCHMARKS.md from bench/results/*.md.

    python -m bench.run_all                 # everything (an hour or more)
    python -m bench.run_all --assemble-only # rebuild BENCHMARKS.md from the results files
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SUMMARY = RESULTS / "summary.md"  # the hand-checked headline table, kept beside the details
# Every figure the summary has shown, run by run, as first recorded: BENCHMARKS.md's last section.
SUMMARY_HISTORY = RESULTS / "summary_history.md"
# (results file, command that writes it), in the order BENCHMARKS.md shows them.
BENCHES: list[tuple[str, list[str]]] = [
    ("lambdamart.md", ["bench.bench_lambdamart", "--write"]),
    ("scoring.md", ["bench.bench_scoring", "--out", str(RESULTS / "scoring.md")]),
    ("service.md", ["bench.bench_service"]),
    ("shed_cost.md", ["bench.bench_shed_cost"]),
    ("overload.md", ["bench.bench_overload"]),
    ("hot_swap.md", ["bench.bench_hot_swap"]),
    ("dnn.md", ["bench.bench_dnn"]),
    ("position_bias.md", ["bench.bench_position_bias"]),
    ("exploration.md", ["bench.bench_exploration"]),
    ("convert.md", ["bench.bench_convert"]),
    ("data.md", ["bench.bench_data"]),
    ("user_features.md", ["bench.bench_user_features"]),
    ("item_features.md", ["bench.bench_item_features"]),
    ("simulate.md", ["bench.bench_simulate"]),
    ("dask.md", ["bench.bench_dask"]),
    ("explain.md", ["bench.bench_explain", "--write"]),
    ("interleaving.md", ["bench.bench_interleaving"]),
    ("first_run.md", ["bench.bench_first_run", "HEAD"]),
]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), "
        f"Python {platform.python_version()}"
    )


def assemble() -> Path:
    parts = [
        "# Benchmarks\n",
        "Produced by `python -m bench.run_all` (each section by the script it names). Machine: "
        f"{machine()}. This machine is small and was shared while we measured, so absolute "
        "times are indicative only; every comparison was run side by side in one process or "
        "one run, and the ratios are the result. NDCG: gain 2^l-1, log2 discount, a query "
        "without relevant documents scores 1 (LightGBM's convention) unless a section says "
        "otherwise.\n",
    ]
    if SUMMARY.is_file():
        parts.append(SUMMARY.read_text())
    for name, _ in BENCHES:
        path = RESULTS / name
        if path.is_file():
            text = path.read_text().strip()
            # Demote the section's own headings one level under BENCHMARKS.md's.
            text = "\n".join(
                "#" + line if line.startswith("#") else line for line in text.splitlines()
            )
            parts.append(text + "\n")
    if SUMMARY_HISTORY.is_file():
        parts.append(SUMMARY_HISTORY.read_text())
    out = ROOT / "BENCHMARKS.md"
    out.write_text("\n".join(parts))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--assemble-only", action="store_true")
    parser.add_argument("--only", default=None, help="comma-separated results files to redo")
    args = parser.parse_args()
    if not args.assemble_only:
        wanted = set(args.only.split(",")) if args.only else None
        for name, command in BENCHES:
            if wanted is None or name in wanted:
                print(f"== {' '.join(command)}", flush=True)
                subprocess.run([sys.executable, "-m", *command], cwd=ROOT, check=True)
    print(assemble())


if __name__ == "__main__":
    main()
