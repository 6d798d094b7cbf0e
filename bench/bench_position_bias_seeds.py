"""Position bias over several simulated datasets: bench_position_bias once per (seed, sessions),
then the share of the naive → true-label NDCG@10 gap each run recovers, mean and spread.

One dataset's gap is about 0.04 NDCG@10 and a run's noise about 0.004, so a single seed moves a
"share of the gap" by ±10 points; the mean over seeds is what decisions rest on.

Run: .venv/bin/python -m bench.bench_position_bias_seeds --seeds 0,1,2,3,4 --sessions 8,16
     [--jobs 2] [--out bench/results/position_bias_seeds] [--only RUN,RUN] [--summarise-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

DEFAULT_RUNS = (
    "c1_ipw_only",
    "c5b_position_bias_full_step",
    "c5b_position_bias_full_step_norm",
    "c5b_position_bias_full_step_trunc30_norm",
    "c7_click_likelihood",
    "lightgbm_true_labels",
    "lightgbm_naive_clicks",
    "lightgbm_position_debiased",
)


def run_one(seed: int, sessions: int, only: str, out: Path) -> Path:
    target = out / f"s{sessions}_seed{seed}.json"
    command = [sys.executable, "-m", "bench.bench_position_bias", "--seed", str(seed)]
    command += ["--sessions", str(sessions), "--only", only, "--json", str(target)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return target


def _mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.0%}" if values else ""
    return f"{statistics.mean(values):.0%} ± {statistics.stdev(values):.0%}"


def _clicks_share(result: dict[str, Any], name: str) -> float:
    clicks = result["expected_clicks10"]
    low, top = clicks["b_naive_clicks"], clicks["a_true_labels"]
    return (clicks[name] - low) / (top - low)


def summarise(results: list[dict[str, Any]]) -> str:
    """A markdown table: per run, mean ± sd of the gap share and mean NDCG@10, and the mean
    share of the expected-clicks gap, per sessions."""
    sessions = sorted({r["args"]["sessions"] for r in results})
    names: list[str] = []
    for r in results:
        names += [n for n in r["ndcg10"] if n not in names]
    head = "| run |" + "".join(
        f" {s} sessions: NDCG@10 gap (NDCG@10) | E[clicks@10] gap |" for s in sessions
    )
    lines = [head, "|---|" + "---|---|" * len(sessions)]
    for name in names:
        cells = []
        for s in sessions:
            group = [r for r in results if r["args"]["sessions"] == s and name in r["ndcg10"]]
            shares = [r["gap_recovered"][name] for r in group if name in r["gap_recovered"]]
            ndcg = statistics.mean(r["ndcg10"][name] for r in group) if group else float("nan")
            cells.append(f" {_mean_sd(shares)} ({ndcg:.4f}) |" if shares else f" ({ndcg:.4f}) |")
            clicks = [_clicks_share(r, name) for r in group if not name.startswith("lightgbm")]
            cells.append(f" {statistics.mean(clicks):.0%} |" if clicks else " |")
        lines.append(f"| {name} |" + "".join(cells))
    seeds = sorted({r["args"]["seed"] for r in results})
    lines.append("")
    lines.append(f"Seeds {', '.join(map(str, seeds))}; gap share = (run - naive) / (true - naive)")
    lines.append("of each seed's own native runs (LightGBM's position run: of its own gap);")
    lines.append("E[clicks@10] gap: the same share of expected clicks in the top 10 (mean).")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--sessions", default="8,16")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default=",".join(DEFAULT_RUNS))
    parser.add_argument("--out", type=Path, default=Path("bench/results/position_bias_seeds"))
    parser.add_argument("--summarise-only", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = [
        (int(seed), int(s)) for seed in args.seeds.split(",") for s in args.sessions.split(",")
    ]
    if not args.summarise_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda p: run_one(p[0], p[1], args.only, args.out), pairs))
    results = []
    for seed, s in pairs:
        path = args.out / f"s{s}_seed{seed}.json"
        if path.is_file():
            results.append(json.loads(path.read_text()))
    print(summarise(results))


if __name__ == "__main__":
    main()
