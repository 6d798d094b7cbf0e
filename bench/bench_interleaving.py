"""Online experiments: how many impressions interleaving and A/B need, their false-positive
rate, how alike real model versions are, the end-to-end promote/rollback loop over real
processes, and the serving overhead.

    python -m bench.bench_interleaving                 # all parts (~25 min on 2 shared cores)
    python -m bench.bench_interleaving --part simulate # sensitivity + A/A (~16 min)
    python -m bench.bench_interleaving --part versions # trained versions vs the simulator's
    python -m bench.bench_interleaving --part trained  # sensitivity with trained versions
    python -m bench.bench_interleaving --part heterogeneous  # users with click propensities
    python -m bench.bench_interleaving --part serving  # /rerank overhead only
    python -m bench.bench_interleaving --part loop     # nightly → clicks → decide, twice
    python -m bench.bench_interleaving --write-only    # rebuild the .md from the .json parts

Each part stores its figures in bench/results/interleaving/<part>.json; the Markdown report
bench/results/interleaving.md is rebuilt from whichever parts exist. For the serving part,
LTR_PREVIOUS_CHECKOUT (and LTR_PREVIOUS_COMMIT, its name in the report, and LTR_PREVIOUS_NOTE,
what differs) adds a server running another copy of the code, interleaved too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PARTS = RESULTS / "interleaving"
OUT = RESULTS / "interleaving.md"

DELTA_NDCG = 0.02
CONTROL_NOISE = 1.6  # sd of the control version's error (true NDCG@10 ~0.74)
# Correlations of the two versions' errors measured side by side: 0 = independent errors
# (versions agree on the top result of ~22 % of queries), up to 0.95 (~78 %, as two LightGBM
# versions trained on halves of the simulator's data do: the `versions` part).
CORRELATIONS = (0.0, 0.5, 0.8, 0.9, 0.95)
AA_CORRELATIONS = (0.0, 0.9)
CALIBRATION_SEED = 1
DECIDE = "click_difference"  # trainer.experiments.simulated.DECIDE_TEST, without the import


def _median(values: list[int | None], cap: int) -> tuple[float, int]:
    """Median with censored runs (None) counted as `cap` (so a lower bound), and how many."""
    filled = [cap if v is None else v for v in values]
    return float(np.median(filled)), sum(v is None for v in values)


def _versions(seed: int, noises: tuple[float, float], rho: float) -> tuple[Any, Any]:
    """A control and a candidate version with their own errors (seeds 2s and 2s + 1)."""
    from trainer.experiments.simulated import Ranker

    return Ranker(noises[0], 2 * seed, rho), Ranker(noises[1], 2 * seed + 1, rho)


def sensitivity(
    world: Any, rho: float, experiments: int, cap: int, methods: tuple[str, ...]
) -> dict[str, Any]:
    """Impressions until significance with a candidate better by DELTA_NDCG, errors of
    correlation `rho`; both methods on the same query streams."""
    from trainer.experiments.simulated import (
        DECIDE_TEST,
        INTERLEAVING_TESTS,
        Ranker,
        simulate_experiment,
    )

    control_ndcg = world.true_ndcg(world.order(Ranker(CONTROL_NOISE, CALIBRATION_SEED, rho)))
    noise = world.noise_for(control_ndcg + DELTA_NDCG, CALIBRATION_SEED + 1, rho)
    traces = []
    for i in range(experiments):
        control, candidate = _versions(1000 + i, (CONTROL_NOISE, noise), rho)
        t = simulate_experiment(
            world, control, candidate, 1000 + i, max_impressions=cap, methods=methods
        )
        traces.append(t)
        print(f"rho {rho} sensitivity {i + 1}/{experiments}: {t.tests_valid} vs {t.ab_valid}")
    deltas = np.array([t.candidate_ndcg - t.control_ndcg for t in traces])
    tests: dict[str, dict[str, Any]] = {}
    for name in INTERLEAVING_TESTS:
        med, cens = _median([t.tests_valid[name] for t in traces], cap)
        tests[name] = {
            "median": med,
            "censored": cens,
            "right_direction": sum(t.tests_sign[name] > 0 for t in traces),
            "each": [t.tests_valid[name] for t in traces],
        }
    ab_med, ab_cens = _median([t.ab_valid for t in traces], cap)
    il_fix, _ = _median([t.interleave_fixed for t in traces], cap)
    ab_fix, ab_fix_cens = _median([t.ab_fixed for t in traces], cap)
    return {
        "correlation": rho,
        "experiments": experiments,
        "cap": cap,
        "control_noise": CONTROL_NOISE,
        "candidate_noise": noise,
        "control_ndcg10": float(np.mean([t.control_ndcg for t in traces])),
        "candidate_ndcg10": float(np.mean([t.candidate_ndcg for t in traces])),
        "delta_ndcg10": {
            "mean": float(deltas.mean()),
            "min": float(deltas.min()),
            "max": float(deltas.max()),
        },
        "top_agreement": float(np.mean([t.top_agreement for t in traces])),
        "interleave": tests,
        "decide_test": DECIDE_TEST,
        "interleave_median": tests[DECIDE_TEST]["median"],
        "interleave_fixed_median": il_fix,
        "ab_median": ab_med,
        "ab_censored": ab_cens,
        "ab_right_direction": sum(t.ab_sign > 0 for t in traces),
        "ab_fixed_median": ab_fix,
        "ab_fixed_censored": ab_fix_cens,
        "ab_each": [t.ab_valid for t in traces],
        "ratio": ab_med / tests[DECIDE_TEST]["median"] if "ab" in methods else None,
    }


def false_positives(world: Any, rho: float, method: str, runs: int, horizon: int) -> dict[str, Any]:
    """A/A: two versions of the same noise (their own errors each), looked at after every
    chunk up to `horizon` impressions."""
    from trainer.experiments.simulated import DECIDE_TEST, INTERLEAVING_TESTS, simulate_experiment

    ts = []
    for i in range(runs):
        control, other = _versions(5000 + i, (CONTROL_NOISE, CONTROL_NOISE), rho)
        ts.append(
            simulate_experiment(
                world, control, other, 5000 + i, max_impressions=horizon, methods=(method,)
            )
        )
        if (i + 1) % 20 == 0:
            print(f"A/A {method} rho {rho} {i + 1}/{runs}", flush=True)
    il = method == "interleave"
    fixed = [t.interleave_fixed if il else t.ab_fixed for t in ts]
    last = [t.final_fixed_interleave if il else t.final_fixed_ab for t in ts]
    out: dict[str, Any] = {
        "correlation": rho,
        "experiments": runs,
        "horizon": horizon,
        "looks": len(ts[0].looks),
        "abs_delta_ndcg10_mean": float(
            np.mean([abs(t.candidate_ndcg - t.control_ndcg) for t in ts])
        ),
        "false_positive_always_valid": (
            sum(t.tests_valid[DECIDE_TEST] is not None for t in ts)
            if il
            else sum(t.ab_valid is not None for t in ts)
        )
        / runs,
        "false_positive_fixed_peeking": sum(v is not None for v in fixed) / runs,
        "false_positive_fixed_one_look": sum(p < 0.05 for p in last) / runs,
    }
    if il:
        out["false_positive_tests"] = {
            name: sum(t.tests_valid[name] is not None for t in ts) / runs
            for name in INTERLEAVING_TESTS
        }
    return out


def _within_query(a: np.ndarray, b: np.ndarray, offsets: np.ndarray) -> tuple[float, float, float]:
    """(mean Spearman correlation of two score vectors within a query, share of queries whose
    top results agree, share of queries whose top 3 agree in order), over queries of >= 3."""
    rho, top1, top3 = [], [], []
    for lo, hi in itertools.pairwise(offsets.tolist()):
        if hi - lo < 3:
            continue
        ra = np.argsort(np.argsort(-a[lo:hi], kind="stable"))
        rb = np.argsort(np.argsort(-b[lo:hi], kind="stable"))
        rho.append(float(np.corrcoef(ra, rb)[0, 1]))
        oa, ob = np.argsort(-a[lo:hi], kind="stable"), np.argsort(-b[lo:hi], kind="stable")
        top1.append(oa[0] == ob[0])
        top3.append(bool((oa[:3] == ob[:3]).all()))
    return float(np.mean(rho)), float(np.mean(top1)), float(np.mean(top3))


def _ndcg10(scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray) -> float:
    values = []
    for lo, hi in itertools.pairwise(offsets.tolist()):
        g = 2.0 ** labels[lo:hi] - 1.0
        d = 1.0 / np.log2(np.arange(2, min(10, hi - lo) + 2))
        ideal = float(np.sort(g)[::-1][: d.size] @ d)
        got = float(g[np.argsort(-scores[lo:hi], kind="stable")][: d.size] @ d)
        values.append(got / ideal if ideal > 0 else 1.0)
    return float(np.mean(values))


def part_versions(rows: int = 300_000, trees: int = 200) -> dict[str, Any]:
    """How alike two versions of a real model are, to place the simulator's `rho`: LightGBM
    LambdaMART versions trained on this simulator's data (lists of 10, as the online
    simulator serves) and compared within the queries of the test split, beside the same
    measures for the online simulator's control and candidate at each rho."""
    import tempfile

    from bench.interleaving_trained import fit_lambdarank
    from trainer.data.loader import load_dataset
    from trainer.experiments.simulated import OnlineWorld, Ranker
    from trainer.simulate import SimulationConfig, simulate

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config = SimulationConfig(rows=rows, users=100_000, seed=0, docs_per_query=(10, 10))
        simulate(config, Path(tmp))
        train = load_dataset(Path(tmp) / "train.parquet")
        test = load_dataset(Path(tmp) / "test.parquet")

    def fit(queries: np.ndarray, n_trees: int, seed: int) -> Any:
        return fit_lambdarank(train, queries, n_trees, seed, threads=1)

    q = np.arange(train.group_offsets.size - 1)
    half_a, half_b = q[q % 2 == 0], q[q % 2 == 1]
    models = {
        "first half": fit(half_a, trees, 1),
        "second half": fit(half_b, trees, 2),
        "all, fewer trees": fit(q, trees // 4, 3),
        "all": fit(q, trees, 4),
    }
    scores = {name: m.predict(test.features, num_threads=1) for name, m in models.items()}
    off = test.group_offsets
    ndcg = {name: _ndcg10(s, test.labels, off) for name, s in scores.items()}
    pairs: list[dict[str, Any]] = []
    for a, b, what in (
        ("first half", "second half", "same configuration, disjoint halves of the data"),
        ("all, fewer trees", "all", f"{trees // 4} vs {trees} trees, same data"),
    ):
        spearman, top1, top3 = _within_query(scores[a], scores[b], off)
        pairs.append(
            {
                "versions": what,
                "ndcg10": [ndcg[a], ndcg[b]],
                "spearman": spearman,
                "top1": top1,
                "top3": top3,
            }
        )
    world = OnlineWorld(SimulationConfig(users=100_000, seed=0), pool_queries=20_000, seed=0)
    offsets = np.arange(0, world.pool.base.size + 1, world.length)
    simulated = []
    for rho in CORRELATIONS:
        control = Ranker(CONTROL_NOISE, CALIBRATION_SEED, rho)
        base = world.true_ndcg(world.order(control))
        noise = world.noise_for(base + DELTA_NDCG, CALIBRATION_SEED + 1, rho)
        candidate = Ranker(noise, CALIBRATION_SEED + 1, rho)
        spearman, top1, top3 = _within_query(
            world.scores(control).ravel(), world.scores(candidate).ravel(), offsets
        )
        simulated.append({"correlation": rho, "spearman": spearman, "top1": top1, "top3": top3})
    # Better rankers agree more whatever their errors' correlation: the same measures for
    # two simulator versions of equal quality, as good as the trained halves.
    target = float(np.mean(pairs[0]["ndcg10"]))
    matched = []
    for rho in CORRELATIONS:
        noise = world.noise_for(target, CALIBRATION_SEED, rho)
        spearman, top1, top3 = _within_query(
            world.scores(Ranker(noise, CALIBRATION_SEED, rho)).ravel(),
            world.scores(Ranker(noise, CALIBRATION_SEED + 1, rho)).ravel(),
            offsets,
        )
        matched.append(
            {
                "correlation": rho,
                "noise": noise,
                "ndcg10": target,
                "spearman": spearman,
                "top1": top1,
                "top3": top3,
            }
        )
    return {
        "rows": rows,
        "trees": trees,
        "test_queries": int(off.size - 1),
        "trained": pairs,
        "simulated": simulated,
        "matched": matched,
        "seconds": time.perf_counter() - started,
    }


def part_simulate(
    experiments: int,
    aa_interleave: int,
    aa_ab: int,
    propensity_sd: float = 0.0,
    cap_impressions: int = 3_000_000,
    correlations: tuple[float, ...] = CORRELATIONS,
    aa_correlations: tuple[float, ...] = AA_CORRELATIONS,
    aa_interleave_horizon: int = 30_000,
    aa_ab_horizon: int = 200_000,
) -> dict[str, Any]:
    from trainer.experiments.simulated import OnlineWorld
    from trainer.simulate.config import SimulationConfig

    started = time.perf_counter()
    config = SimulationConfig(users=100_000, seed=0)
    world = OnlineWorld(
        config, list_length=10, pool_queries=200_000, seed=0, click_propensity_sd=propensity_sd
    )
    runs = [
        sensitivity(world, rho, experiments, cap_impressions, ("interleave", "ab"))
        for rho in correlations
    ]
    aa: dict[str, Any] = {"interleave": [], "ab": []}
    for rho in aa_correlations if aa_interleave else ():
        aa["interleave"].append(
            false_positives(world, rho, "interleave", aa_interleave, aa_interleave_horizon)
        )
    if aa_ab:
        aa["ab"].append(false_positives(world, aa_correlations[0], "ab", aa_ab, aa_ab_horizon))
    return {
        "sensitivity": runs,
        "aa": aa,
        "credit": "common-prefix-and-alike-rounds-neutral",
        "rankers": "deterministic",
        "world": {
            "click_propensity_sd": propensity_sd,
            "users": config.users,
            "pool_queries": 200_000,
            "list_length": 10,
            "eta": config.eta,
            "click_noise": config.click_noise,
        },
        "load_average": os.getloadavg()[0],
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
    if sim:
        lines += simulate_md(sim, parts.get("simulate_prefix_only"))
    versions = parts.get("versions")
    if versions:
        lines += versions_md(versions)
    trained = parts.get("trained")
    if trained:
        from bench.interleaving_trained import render as trained_md

        lines += trained_md(trained)
    het = parts.get("heterogeneous")
    if het:
        lines += heterogeneous_md(het)
    serving = parts.get("serving")
    if serving:
        lines += serving_md(serving)
    loop = parts.get("loop")
    if loop:
        lines += loop_md(loop)
    OUT.write_text("\n".join(lines) + "\n")
    return OUT


def _ratio(ab: float, il: float) -> str:
    return f"{ab / il:.1f}×"


def simulate_md(sim: dict[str, Any], prefix_only: dict[str, Any] | None = None) -> list[str]:
    """Sensitivity (one row per error correlation, both methods on the same query streams)
    and the A/A false-positive rates; `prefix_only`, the same part run when only the common
    prefix was credited to neither team, for comparison."""
    runs, w = sim["sensitivity"], sim["world"]
    first = runs[0]
    lines = [
        "## Sensitivity: impressions until the candidate is significantly better",
        "",
        f"Simulator (`ltr simulate` world, seed 0): {w['users']:,} users, a pool of "
        f"{w['pool_queries']:,} queries of {w['list_length']} candidates with graded labels "
        f"drawn from each user's latent type, position-based clicks (eta {w['eta']}, "
        f"epsilon {w['click_noise']}). Experiments draw their queries from the pool uniformly "
        "with replacement, so queries recur as in a query log.",
        "",
        "A model version is deterministic, as a deployed one is: the user-blind expected "
        "relevance plus an error fixed per (version, query, candidate), `noise * (sqrt(rho) * "
        "common + sqrt(1 - rho) * own)`, where `common` is drawn once for the world (what all "
        "versions of the model get wrong alike: same features, much the same training data) "
        "and `own` from the version's seed. `rho` is the correlation of two versions' errors. "
        f"Control noise {first['control_noise']}; the candidate's noise is calibrated (on a "
        "calibration pair of versions, per rho) to be +0.02 true NDCG@10 better, and every "
        "experiment draws a fresh pair of versions, whose true NDCG@10 on the pool is measured "
        "exactly (the delta column: mean and range over the experiments). A simulated "
        "experiment serves the same query stream with team-draft interleaving "
        "(`app.experiments.team_draft`: the common prefix, and rounds either coin serves "
        "alike, credited to neither team) and with an "
        "A/B split of users hashed into arms (`app.experiments.assignment`, 50/50), credited "
        "by `trainer.experiments.credit`, tested by `trainer.experiments.statistics`, and "
        "looked at after every chunk (chunks grow by 10 %, first look at 500 impressions) "
        "until the always-valid p < 0.05 (mSPRT). A/B is clicks per impression with the "
        "variance over users by the delta method.",
        "",
        "| rho | versions' top result the same | control NDCG@10 | candidate − control "
        "(mean, range) | interleaving, click-difference test (`decide`): median impressions "
        "| A/B on clicks: median impressions | **A/B ÷ interleaving** | A/B pooled over all "
        "rows ÷ interleaving | decided for the better model (interleaving, A/B) | "
        "interleaving, sign test (before): median impressions | A/B ÷ that |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    # A/B serves each arm one version alone, so its distribution does not depend on rho
    # (the versions' quality is calibrated the same at every rho): pooling its runs over
    # the rows gives a steadier median to compare each row's interleaving with.
    pooled, pooled_cens = _median([v for r in runs for v in r["ab_each"]], first["cap"])
    for r in runs:
        il, ab = r["interleave"], r["ab_median"]
        d = r["delta_ndcg10"]
        main, sign = il[DECIDE], il["sign"]
        censored = (
            f" ({r['ab_censored']} not significant by {r['cap']:,})" if r["ab_censored"] else ""
        )
        lines.append(
            f"| {r['correlation']} | {100 * r['top_agreement']:.0f} % | "
            f"{r['control_ndcg10']:.4f} | +{d['mean']:.4f} ({d['min']:+.4f} to "
            f"{d['max']:+.4f}) | {main['median']:,.0f} | {ab:,.0f}{censored} | "
            f"**{_ratio(ab, main['median'])}** | {_ratio(pooled, main['median'])} | "
            f"{main['right_direction']} / {r['experiments']}, {r['ab_right_direction']} / "
            f"{r['experiments']} | {sign['median']:,.0f} | {_ratio(ab, sign['median'])} |"
        )
    pairs = [
        (a, b)
        for r in runs
        for a, b in zip(
            r["interleave"]["sign"]["each"], r["interleave"]["wins_losses"]["each"], strict=True
        )
    ]
    same, total = sum(a == b for a, b in pairs), len(pairs)
    lines += [
        "",
        f"{first['experiments']} experiments per row (seeds 1000-{999 + first['experiments']}"
        f", the same for every rho). A/B pooled: the median of all {total} A/B runs, "
        f"{pooled:,.0f} impressions"
        + (f" ({pooled_cens} not significant by {first['cap']:,})" if pooled_cens else "")
        + ". `decide` tests the mean click difference per clicked impression (the "
        "candidate's team clicks minus the control's); the sign test (+1 win, -1 loss, 0 tie "
        "per clicked impression) is what it tested before, measured on the same streams. "
        "The sign test on non-tied impressions only (wins vs losses) crossed p < 0.05 at the "
        f"same look as the sign test over clicked impressions in {same} of {total} "
        "experiments: both have the same z, and the mixture of the always-valid test spans "
        "the effect scales either way. For scale, the fixed-horizon tests looked at after "
        "every chunk (an invalid stopping rule) cross p < 0.05 at a median of "
        + ", ".join(
            f"{r['interleave_fixed_median']:,.0f} (interleaving, sign test) and "
            f"{r['ab_fixed_median']:,.0f} (A/B) at rho {r['correlation']}"
            for r in runs
        )
        + ".",
        "",
    ]
    if prefix_only:
        before = {r["correlation"]: r for r in prefix_only["sensitivity"]}
        lines += [
            "Rounds served alike: a round (two picks) whose two results are the same, in the "
            "same order, for both versions' best two not yet taken is served identically "
            "whichever team the coin sends first, so its clicks' team is the coin's alone; "
            "it is now credited to neither team, as the common prefix was (the expected "
            "credit given the served list and the clicks: a Rao-Blackwellisation of team "
            "draft's credit, unbiased as before). The same seeds with only the common prefix "
            "neutral (the previous rule, run before): `decide`'s test needed a median of "
            + ", ".join(
                f"{before[r['correlation']]['interleave'][DECIDE]['median']:,.0f} (now "
                f"{r['interleave'][DECIDE]['median']:,.0f}) at rho {r['correlation']}"
                for r in runs
                if r["correlation"] in before
            )
            + ". A paired check on 16 streams per rho (each stream credited both ways, "
            "the click difference's variance per clicked impression): -7 % at rho 0, -17 % "
            "at 0.8, -23 % at 0.9; medians 13,613 -> 12,376, 6,988 -> 5,775, "
            "5,250 -> 3,750 impressions. A/B's column moves between the two runs although "
            "A/B's code did not change: both methods draw from one random stream per "
            "experiment and interleaving stops drawing sooner now, so A/B sees other "
            "clicks; 50 experiments put its per-row median within about ±20 % (62,536 to "
            "95,917 here), which is why the pooled column is given.",
            "",
        ]
    lines += [
        "Making the versions deterministic changes nothing by itself: with independent "
        "errors (rho 0) one impression's outcome has the same distribution as when the "
        "errors were redrawn at every impression (the previous simulator measured 17,255 "
        "impressions for interleaving with the sign test, 79,271 for A/B: 4.6×); only a "
        "query's repeats are now correlated, and an experiment of 15,000 impressions serves "
        "under 4 % of them to a query it served before. What "
        "sets interleaving's advantage is how alike the two versions are. Interleaving's "
        "evidence comes from the results the two place differently; with independent errors "
        "at this noise they disagree about most of every list, the team that gets a click is "
        "close to a coin flip, and a 0.02 NDCG@10 difference moves it little. Versions that "
        "share most of their errors disagree only where the candidate corrects the control, "
        "so each click on a disputed result says more. A/B compares each arm's click rate, "
        "whose noise (which user clicks how much) does not depend on the other arm.",
        "",
        "## False positives with equal models (A/A)",
        "",
        "Both arms are versions of the same noise with their own errors (so the rankings "
        "differ; their true NDCG@10 differs only by sampling, the |delta| column). An "
        "experiment is a false positive if the test reaches p < 0.05 at any look before the "
        "horizon (looks as above: 500 impressions, then chunks growing by 10 %).",
        "",
        "| method | rho | experiments | horizon (impressions) | looks | mean abs. delta "
        "NDCG@10 | always-valid p, `decide`'s test | always-valid p, sign test (before) | "
        "fixed-horizon p, peeking at every look | fixed-horizon p, one look at the end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    aa = sim["aa"]
    for a in aa.get("interleave", []):
        tests = a["false_positive_tests"]
        lines.append(
            f"| interleaving | {a['correlation']} | {a['experiments']} | {a['horizon']:,} | "
            f"{a['looks']} | {a['abs_delta_ndcg10_mean']:.5f} | "
            f"**{100 * tests[DECIDE]:.1f} %** | {100 * tests['sign']:.1f} % | "
            f"{100 * a['false_positive_fixed_peeking']:.1f} % | "
            f"{100 * a['false_positive_fixed_one_look']:.1f} % |"
        )
    for a in aa.get("ab", []):
        lines.append(
            f"| A/B on clicks | {a['correlation']} | {a['experiments']} | {a['horizon']:,} | "
            f"{a['looks']} | {a['abs_delta_ndcg10_mean']:.5f} | "
            f"**{100 * a['false_positive_always_valid']:.1f} %** | | "
            f"{100 * a['false_positive_fixed_peeking']:.1f} % | "
            f"{100 * a['false_positive_fixed_one_look']:.1f} % |"
        )
    return [
        *lines,
        "",
        "The fixed-horizon columns of interleaving are the sign test's (the report's p).",
        "",
        f"Simulation time: {sim['seconds']:.0f} s (sensitivity and A/A, one process at nice "
        f"19; load average {sim['load_average']:.1f} at the end).",
        "",
    ]


def _nearest(pair: dict[str, Any], matched: list[dict[str, Any]]) -> dict[str, Any]:
    """The equal-quality simulator row whose Spearman is nearest a trained pair's."""
    return min(matched, key=lambda row: abs(row["spearman"] - pair["spearman"]))


def versions_md(v: dict[str, Any]) -> list[str]:
    lines = [
        "### How alike are two versions of a model?",
        "",
        "Which rho is realistic depends on how much two versions of a model share their "
        "errors. To place it, LightGBM LambdaMART models (31 leaves, learning rate 0.1) were "
        f"trained on this simulator's data ({v['rows']:,} rows, lists of 10 as served "
        "above) and compared within the test split's "
        f"{v['test_queries']:,} queries, beside the simulator's control and candidate "
        "versions at each rho. Spearman: the rank correlation of the two versions' scores "
        "within a query (mean over queries); top 1 / top 3: the share of queries whose first "
        "result / first three results in order are the same.",
        "",
        "| versions | NDCG@10 (test) | Spearman within a query | top 1 the same | top 3 the same |",
        "|---|---|---:|---:|---:|",
    ]
    for pair in v["trained"]:
        a, b = pair["ndcg10"]
        lines.append(
            f"| trained: {pair['versions']} | {a:.4f}, {b:.4f} | {pair['spearman']:.3f} | "
            f"{100 * pair['top1']:.0f} % | {100 * pair['top3']:.0f} % |"
        )
    for row in v["simulated"]:
        lines.append(
            f"| simulator, rho {row['correlation']} (candidate +0.02 NDCG@10) | | "
            f"{row['spearman']:.3f} | {100 * row['top1']:.0f} % | {100 * row['top3']:.0f} % |"
        )
    for row in v.get("matched", []):
        lines.append(
            f"| simulator, rho {row['correlation']}, two versions of equal quality (noise "
            f"{row['noise']:.3f}) | {row['ndcg10']:.4f} | {row['spearman']:.3f} | "
            f"{100 * row['top1']:.0f} % | {100 * row['top3']:.0f} % |"
        )
    return [
        *lines,
        "",
        "The trained versions are better rankers than the simulator's control (NDCG@10 "
        "0.82 vs 0.74), and better rankers agree more whatever their errors' correlation, "
        "so they are compared with simulator versions of the same quality (the last rows): "
        + "; ".join(
            f"{pair['versions']} agree like equal-quality simulator versions of rho "
            f"{_nearest(pair, v['matched'])['correlation']} (nearest Spearman)"
            for pair in v["trained"]
        )
        + ". The NDCG@10 of the trained versions is computed on the test split's labels, the "
        "simulator's on its pool's: the same world and label distribution.",
        "",
        f"Time: {v['seconds']:.0f} s.",
        "",
    ]


def heterogeneous_md(het: dict[str, Any]) -> list[str]:
    runs = het["sensitivity"]
    lines = [
        "### The same with users who differ in how much they click",
        "",
        "The simulator's click model gives every user the same click probabilities. Real "
        "users differ; here each user's click probabilities are multiplied by a lognormal "
        f"propensity (mean 1, log-sd {het['world']['click_propensity_sd']}, capped at "
        "probability 1), everything else as above. Interleaving compares the two versions "
        "within each list, so a user's propensity cancels; A/B pays for it in variance. "
        f"{runs[0]['experiments']} experiments per row, A/B capped at {runs[0]['cap']:,} "
        "impressions (a censored run counts as the cap, so A/B's median is a lower bound).",
        "",
        "| rho | interleaving: median impressions | A/B: median impressions | not "
        "significant by the cap (interleaving, A/B) | decided for the better model "
        "(interleaving, A/B) | **A/B ÷ interleaving** |",
        "|---:|---:|---:|---|---|---:|",
    ]
    for r in runs:
        il = r["interleave"][DECIDE]
        lines.append(
            f"| {r['correlation']} | {il['median']:,.0f} | {r['ab_median']:,.0f} | "
            f"{il['censored']}, {r['ab_censored']} | {il['right_direction']} / "
            f"{r['experiments']}, {r['ab_right_direction']} / {r['experiments']} | "
            f"**≥ {_ratio(r['ab_median'], il['median'])}** |"
        )
    return [*lines, "", f"Simulation time: {het['seconds']:.0f} s.", ""]


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
        choices=["simulate", "versions", "trained", "heterogeneous", "serving", "loop"],
        action="append",
    )
    parser.add_argument("--propensity-sd", type=float, default=0.5)
    parser.add_argument("--experiments", type=int, default=50)
    parser.add_argument("--aa-interleave", type=int, default=200)
    parser.add_argument("--aa-ab", type=int, default=200)
    parser.add_argument("--heterogeneous-experiments", type=int, default=20)
    parser.add_argument("--write-only", action="store_true")
    args = parser.parse_args()
    PARTS.mkdir(parents=True, exist_ok=True)
    if not args.write_only:
        everything = ["simulate", "versions", "trained", "heterogeneous", "serving", "loop"]
        for part in args.part or everything:
            if part == "simulate":
                result = part_simulate(args.experiments, args.aa_interleave, args.aa_ab)
            elif part == "versions":
                result = part_versions()
            elif part == "trained":
                from bench.interleaving_trained import run as run_trained

                result = run_trained(args.experiments)
            elif part == "heterogeneous":
                result = part_simulate(
                    args.heterogeneous_experiments,
                    0,
                    0,
                    args.propensity_sd,
                    1_000_000,
                    correlations=(0.0, 0.8),
                )
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
