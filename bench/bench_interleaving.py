"""Online experiments: how many impressions interleaving and A/B need, their false-positive
rate, the end-to-end promote/rollback loop over real processes, and the serving overhead.

    python -m bench.bench_interleaving                 # all parts (~1 h on 2 shared cores)
    python -m bench.bench_interleaving --part simulate # sensitivity + A/A only
    python -m bench.bench_interleaving --part interleave     # interleaving alone (rerun)
    python -m bench.bench_interleaving --part heterogeneous  # users with click propensities
    python -m bench.bench_interleaving --part serving  # /rerank overhead only
    python -m bench.bench_interleaving --part loop     # nightly → clicks → decide, twice
    python -m bench.bench_interleaving --write-only    # rebuild the .md from the .json parts

Each part stores its figures in bench/results/interleaving/<part>.json; the Markdown report
bench/results/interleaving.md is rebuilt from whichever parts exist.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PARTS = RESULTS / "interleaving"
OUT = RESULTS / "interleaving.md"

DELTA_NDCG = 0.02
CONTROL_NOISE = 1.6  # sd of the control ranker's noise (true NDCG@10 ~0.74)


def _median(values: list[int | None], cap: int) -> tuple[float, int]:
    """Median with censored runs (None) counted as `cap` (so a lower bound), and how many."""
    filled = [cap if v is None else v for v in values]
    return float(np.median(filled)), sum(v is None for v in values)


def part_simulate(
    experiments: int,
    aa_interleave: int,
    aa_ab: int,
    propensity_sd: float = 0.0,
    cap_impressions: int = 3_000_000,
    methods: tuple[str, ...] = ("interleave", "ab"),
    aa_interleave_horizon: int = 50_000,
) -> dict[str, Any]:
    from trainer.experiments.simulated import OnlineWorld, simulate_experiment
    from trainer.simulate.config import SimulationConfig

    started = time.perf_counter()
    config = SimulationConfig(users=100_000, seed=0)
    world = OnlineWorld(
        config, list_length=10, pool_queries=200_000, seed=0, click_propensity_sd=propensity_sd
    )
    control_ndcg = world.true_ndcg(CONTROL_NOISE, np.random.default_rng(1), repeats=5)
    better_noise = world.noise_for(control_ndcg + DELTA_NDCG, seed=1)
    better_ndcg = world.true_ndcg(better_noise, np.random.default_rng(2), repeats=5)
    cap = cap_impressions
    traces = []
    for i in range(experiments):
        traces.append(
            simulate_experiment(
                world, CONTROL_NOISE, better_noise, 1000 + i, max_impressions=cap, methods=methods
            )
        )
        print(
            f"sensitivity {i + 1}/{experiments}: {traces[-1].interleave_valid} vs "
            f"{traces[-1].ab_valid}",
            flush=True,
        )
    il_med, il_cens = _median([t.interleave_valid for t in traces], cap)
    ab_med, ab_cens = _median([t.ab_valid for t in traces], cap)
    il_fix, _ = _median([t.interleave_fixed for t in traces], cap)
    ab_fix, ab_fix_cens = _median([t.ab_fixed for t in traces], cap)
    sensitivity = {
        "experiments": experiments,
        "control_ndcg10": control_ndcg,
        "candidate_ndcg10": better_ndcg,
        "control_noise": CONTROL_NOISE,
        "candidate_noise": better_noise,
        "cap": cap,
        "interleave_median": il_med,
        "interleave_censored": il_cens,
        "ab_median": ab_med,
        "ab_censored": ab_cens,
        "ratio": ab_med / il_med,
        "interleave_right_direction": sum(t.interleave_sign > 0 for t in traces),
        "ab_right_direction": sum(t.ab_sign > 0 for t in traces),
        "interleave_fixed_median": il_fix,
        "ab_fixed_median": ab_fix,
        "ab_fixed_censored": ab_fix_cens,
        "interleave_each": [t.interleave_valid for t in traces],
        "ab_each": [t.ab_valid for t in traces],
    }
    aa: dict[str, Any] = {}
    for method, runs, horizon in (
        ("interleave", aa_interleave, aa_interleave_horizon),
        ("ab", aa_ab, 200_000),
    ):
        if not runs:
            continue
        ts = []
        for i in range(runs):
            ts.append(
                simulate_experiment(
                    world,
                    CONTROL_NOISE,
                    CONTROL_NOISE,
                    5000 + i,
                    max_impressions=horizon,
                    methods=(method,),
                )
            )
            if (i + 1) % 20 == 0:
                print(f"A/A {method} {i + 1}/{runs}", flush=True)
        valid = [t.interleave_valid if method == "interleave" else t.ab_valid for t in ts]
        fixed = [t.interleave_fixed if method == "interleave" else t.ab_fixed for t in ts]
        last = [
            t.final_fixed_interleave if method == "interleave" else t.final_fixed_ab for t in ts
        ]
        aa[method] = {
            "experiments": runs,
            "horizon": horizon,
            "looks": len(ts[0].looks),
            "false_positive_always_valid": sum(v is not None for v in valid) / runs,
            "false_positive_fixed_peeking": sum(v is not None for v in fixed) / runs,
            "false_positive_fixed_one_look": sum(p < 0.05 for p in last) / runs,
        }
    return {
        "sensitivity": sensitivity,
        "aa": aa,
        # How interleaving was credited: the common prefix counts for neither team (the
        # code's rule since it was introduced); runs before that credited every click.
        "credit": "common-prefix-neutral",
        "world": {
            "click_propensity_sd": propensity_sd,
            "users": config.users,
            "pool_queries": 200_000,
            "list_length": 10,
            "eta": config.eta,
            "click_noise": config.click_noise,
        },
        "seconds": time.perf_counter() - started,
    }


def machine() -> str:
    from bench.run_all import machine as describe

    return describe()


def write_md() -> Path:
    parts = {p.stem: json.loads(p.read_text()) for p in sorted(PARTS.glob("*.json"))}
    lines = ["# Online experiments: interleaving vs A/B (`bench/bench_interleaving.py`)", ""]
    lines.append(f"Machine: {machine()}.")
    lines.append("")
    sim = parts.get("simulate")
    il = parts.get("interleave")
    if sim:
        lines += simulate_md(sim, il)
    het = parts.get("heterogeneous")
    if het:
        h = het["sensitivity"]
        lines += [
            "### The same with users who differ in how much they click",
            "",
            "The simulator's click model gives every user the same click probabilities. Real "
            "users differ; here each user's click probabilities are multiplied by a lognormal "
            f"propensity (mean 1, log-sd {het['world']['click_propensity_sd']}, capped at "
            "probability 1), everything else as above (interleaving with the code's credit). "
            "Interleaving compares the two rankers "
            "within each list, so a user's propensity cancels; A/B pays for it in variance.",
            "",
            "| | interleaving | A/B on clicks/impression | A/B ÷ interleaving |",
            "|---|---:|---:|---:|",
            f"| median impressions until always-valid p < 0.05, {h['experiments']} experiments "
            f"| {h['interleave_median']:,.0f} | {h['ab_median']:,.0f} | **{h['ratio']:.0f}×** |",
            f"| not significant within {h['cap']:,} | {h['interleave_censored']} | "
            f"{h['ab_censored']} | |",
            f"| decided for the better model | {h['interleave_right_direction']} / "
            f"{h['experiments']} | {h['ab_right_direction']} / {h['experiments']} | |",
            "",
        ]
    serving = parts.get("serving")
    if serving:
        lines += serving_md(serving)
    loop = parts.get("loop")
    if loop:
        lines += loop_md(loop)
    OUT.write_text("\n".join(lines) + "\n")
    return OUT


def simulate_md(sim: dict[str, Any], il: dict[str, Any] | None) -> list[str]:
    """Sensitivity and A/A tables. `sim` ran both methods side by side (interleaving credited
    every click then); `il`, if present, reran interleaving alone with the credit the code
    uses now (the rankings' common prefix credited to neither team)."""
    s, w = sim["sensitivity"], sim["world"]
    ab = s["ab_median"]
    lines = [
        "## Sensitivity: impressions until the candidate is significantly better",
        "",
        f"Simulator (`ltr simulate` world, seed 0): {w['users']:,} users, a pool of "
        f"{w['pool_queries']:,} queries of {w['list_length']} candidates with graded labels "
        f"drawn from each user's latent type, position-based clicks (eta {w['eta']}, "
        f"epsilon {w['click_noise']}). Rankers are the user-blind expected relevance plus "
        f"Gaussian noise, redrawn for each impression: control noise {s['control_noise']} "
        f"(true NDCG@10 {s['control_ndcg10']:.4f}), candidate noise "
        f"{s['candidate_noise']:.3f} (true NDCG@10 {s['candidate_ndcg10']:.4f}, "
        f"+{s['candidate_ndcg10'] - s['control_ndcg10']:.4f}). A simulated experiment serves "
        "a stream of queries with team-draft interleaving (`app.experiments.team_draft`) "
        "and with an A/B split of users hashed into arms (`app.experiments.assignment`, "
        "50/50), credited by `trainer.experiments.credit`, tested by "
        "`trainer.experiments.statistics`, and looked at after every chunk (chunks grow by "
        "10 %, first look at 500 impressions) until the always-valid p < 0.05.",
        "",
        f"| method ({s['experiments']} experiments each) | median impressions, always-valid "
        "p < 0.05 (what `decide` uses) | A/B ÷ this | decided for the better model | "
        "median impressions, fixed-horizon p < 0.05 at some look (peeking, for scale) |",
        "|---|---:|---:|---:|---:|",
    ]
    if il:
        t = il["sensitivity"]
        lines.append(
            f"| interleaving, common prefix credited to neither team (**the code's credit**) | "
            f"{t['interleave_median']:,.0f} | **{ab / t['interleave_median']:.1f}×** | "
            f"{t['interleave_right_direction']} / {t['experiments']} | "
            f"{t['interleave_fixed_median']:,.0f} |"
        )
    plain = sim.get("credit") != "common-prefix-neutral"
    label = (
        "interleaving, every click credited (plain team draft)"
        if plain
        else "interleaving, common prefix credited to neither team (**the code's credit**)"
    )
    lines += [
        f"| {label} | "
        f"{s['interleave_median']:,.0f} | {ab / s['interleave_median']:.1f}× | "
        f"{s['interleave_right_direction']} / {s['experiments']} | "
        f"{s['interleave_fixed_median']:,.0f} |",
        f"| A/B on clicks per impression (variance over users, delta method) | {ab:,.0f} | 1× | "
        f"{s['ab_right_direction']} / {s['experiments']} | {s['ab_fixed_median']:,.0f} |",
        "",
        "The plain team-draft and A/B rows come from one run that served each query stream "
        "both ways; the first row is a rerun of interleaving alone (same world, rankers and "
        "seeds; the random streams differ since no A/B draws are made) after the credit "
        "change; A/B's code path did not change.",
        "",
        "## False positives with equal models (A/A)",
        "",
        "Both arms are rankers of the same quality (same noise, independent draws, so the "
        "rankings differ). An experiment is a false positive if the test reaches p < 0.05 at "
        "any look before the horizon.",
        "",
        "| method | experiments | horizon (impressions) | looks | always-valid p (`decide`) "
        "| fixed-horizon p, peeking at every look | fixed-horizon p, one look at the end |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    if il:
        rows.append(("interleaving (the code's credit)", il["aa"]["interleave"]))
    rows += [
        ("interleaving, plain credit" if plain else "interleaving", sim["aa"]["interleave"]),
        ("A/B", sim["aa"]["ab"]),
    ]
    for method, a in rows:
        lines.append(
            f"| {method} | {a['experiments']} | {a['horizon']:,} | {a['looks']} | "
            f"**{100 * a['false_positive_always_valid']:.1f} %** | "
            f"{100 * a['false_positive_fixed_peeking']:.1f} % | "
            f"{100 * a['false_positive_fixed_one_look']:.1f} % |"
        )
    seconds = sim["seconds"] + (il["seconds"] if il else 0)
    return [*lines, "", f"Simulation time: {seconds:.0f} s.", ""]


def serving_md(s: dict[str, Any]) -> list[str]:
    from bench.interleaving_serving import render

    return render(s)


def loop_md(s: dict[str, Any]) -> list[str]:
    from bench.interleaving_loop import render

    return render(s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--part",
        choices=["simulate", "interleave", "heterogeneous", "serving", "loop"],
        action="append",
    )
    parser.add_argument("--propensity-sd", type=float, default=0.5)
    parser.add_argument("--experiments", type=int, default=50)
    parser.add_argument("--aa-interleave", type=int, default=200)
    parser.add_argument("--aa-ab", type=int, default=100)
    parser.add_argument("--write-only", action="store_true")
    args = parser.parse_args()
    PARTS.mkdir(parents=True, exist_ok=True)
    if not args.write_only:
        for part in args.part or ["simulate", "heterogeneous", "serving", "loop"]:
            if part == "simulate":
                result = part_simulate(args.experiments, args.aa_interleave, args.aa_ab)
            elif part == "interleave":
                # Interleaving alone (A/B figures stay those of the last `simulate` part).
                result = part_simulate(
                    args.experiments,
                    args.aa_interleave,
                    0,
                    methods=("interleave",),
                    aa_interleave_horizon=30_000,
                )
            elif part == "heterogeneous":
                result = part_simulate(args.experiments, 0, 0, args.propensity_sd, 1_000_000)
            elif part == "serving":
                from bench.interleaving_serving import run as run_serving

                result = run_serving()
            else:
                from bench.interleaving_loop import run as run_loop

                result = run_loop()
            (PARTS / f"{part}.json").write_text(json.dumps(result, indent=1))
    print(write_md())


if __name__ == "__main__":
    main()
