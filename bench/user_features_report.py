"""bench/results/user_features.md from the figures bench.bench_user_features wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.user_features_quality import DEFAULT_ROWS, DEFAULT_USERS, ROWS

GENERATOR_TITLES = {
    "simulate": "`ltr simulate` (scheme A: the shipped country, age, price_level; B: reversed)",
    "combo": "bench.generate_personal, combination effects (A: country, device, price_level, "
    "age; B: age, price_level, device, country)",
}


def _quality_table(figures: dict[str, Any]) -> list[str]:
    runs = figures["runs"]
    lines = [
        f"### {GENERATOR_TITLES[figures['generator']]}" + _size(figures["settings"]),
        "",
        f"{figures['settings']['rows']:,} rows, {figures['settings']['users']:,} users; "
        f"{len(runs)} seeds; test queries per seed {runs[0]['queries'][2]}. NDCG@10 on the "
        "test split, mean ± sd over seeds, then each seed's value." + _partial(runs),
        "",
        "| model | test NDCG@10 | per seed | train s (mean) |",
        "| --- | ---: | --- | ---: |",
    ]
    carried = {k for r in runs for k in r.get("carried_over", [])}
    for key, title in ROWS:
        values = [r["ndcg"][key] for r in runs if key in r["ndcg"]]
        if not values:
            continue
        secs = np.mean([r["seconds"][key] for r in runs if key in r["seconds"]])
        per = ", ".join(f"{v:.4f}" for v in values)
        mark = " †" if key in carried else ""
        lines.append(
            f"| {title}{mark} | {np.mean(values):.4f} ± {np.std(values):.4f} | {per} | {secs:.0f} |"
        )
    lines.append("")
    if carried:
        lines += [
            "† measured by an earlier run of the bench with the same code and settings, which "
            "the latest run (the unmarked rows) did not repeat.",
            "",
        ]
    for kind in ("dnn_clusters", "dnn_fields", "dnn_user"):
        if not all(f"{kind}_A" in r["ndcg"] and f"{kind}_B" in r["ndcg"] for r in runs):
            continue
        gaps = [abs(r["ndcg"][f"{kind}_A"] - r["ndcg"][f"{kind}_B"]) for r in runs]
        lines.append(
            f"- |order A − order B|, {kind.replace('_', ' ')}: mean {np.mean(gaps):.4f}, "
            f"max {np.max(gaps):.4f}; per seed " + ", ".join(f"{g:.4f}" for g in gaps)
        )
    if all("dnn_user_A_reseeded" in r["ndcg"] for r in runs):
        gaps = [abs(r["ndcg"]["dnn_user_A"] - r["ndcg"]["dnn_user_A_reseeded"]) for r in runs]
        lines.append(
            "- |order A − order A, another training seed|, dnn user (the noise floor): "
            f"mean {np.mean(gaps):.4f}, max {np.max(gaps):.4f}; per seed "
            + ", ".join(f"{g:.4f}" for g in gaps)
        )
    for order in ("A", "B"):
        if not all(f"dnn_user_{order}" in r["ndcg"] and "dnn_onehot" in r["ndcg"] for r in runs):
            continue
        lift = [r["ndcg"][f"dnn_user_{order}"] - r["ndcg"]["dnn_onehot"] for r in runs]
        lines.append(
            f"- DNN + user features − DNN + one-hot (order {order}): "
            + ", ".join(f"{v:+.4f}" for v in lift)
        )
    lines.append("")
    return lines


def _size(settings: dict[str, Any]) -> str:
    """A heading suffix for a run at other than the default sizes."""
    if settings["rows"] == DEFAULT_ROWS and settings["users"] == DEFAULT_USERS:
        return ""
    return f", {settings['rows']:,} rows and {settings['users']:,} users"


def _partial(runs: list[dict[str, Any]]) -> str:
    """A note when a run measured only some of the rows (and carried none over)."""
    measured = set(runs[0]["ndcg"])
    if len(measured) == len(ROWS) or runs[0].get("carried_over"):
        return ""
    return " Only the rows the targets compare were measured at this size."


def _load(figures: dict[str, Any]) -> str:
    """The 1-minute load average before and after the measurement, when recorded."""
    if "load_average_before" not in figures:
        return "Load average not recorded."
    return (
        f"1-minute load average {figures['load_average_before']:.1f} before, "
        f"{figures['load_average_after']:.1f} after (2 cores)."
    )


def render(figures_dir: Path, machine: str) -> str:
    lines = [
        "# User features: quality and cost",
        "",
        "`python -m bench.bench_user_features`; " + machine + ", 2 cores shared with other "
        "engineers while measured (noisy: read the ratios).",
        "",
        "## Ranking quality",
        "",
        "Every model through the product's code paths (`ltr train` engines, the service's "
        "scorer, each test list scored with the vector the service computes for its user, as "
        "`ltr evaluate --user-profiles` does). Networks: hidden 128,64, at most 40 epochs, "
        "early stop 8 on validation NDCG@10, 1 thread; user vector width 32, minimum 20 users "
        "per cluster id, field value or field combination; combination rows: pairs and triples "
        "of field values hashed into 65,536 buckets. Trees: LightGBM lambdarank, 31 leaves, "
        "lr 0.05, up to "
        "300 trees, early stop 30. One-hot: one column per bucketised token of the scheme's "
        "fields (the same information the clusters see).",
        "",
    ]
    for name in ("simulate", "combo"):
        # The default sizes first, then any labelled run (other sizes) of the same generator.
        for path in sorted(figures_dir.glob(f"quality_{name}*.json"), key=lambda p: len(p.name)):
            lines += _quality_table(json.loads(path.read_text()))
    serving = figures_dir / "serving.json"
    if serving.exists():
        s = json.loads(serving.read_text())
        lines += [
            "## Serving cost",
            "",
            f"POST /rerank with {s['candidates']} candidates on the real service (uvicorn, one "
            f"worker, in-process embeddings), {s['requests']} requests per model, alternating "
            "with vs without user features; models of the combination generator, seed 0.",
            "",
            "| engine | off p50 ms | on p50 ms | on / off p50 | off p99 ms | on p99 ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for engine in ("dnn", "lambdamart"):
            e = s[engine]
            lines.append(
                f"| {engine} | {e['off_p50']:.2f} | {e['on_p50']:.2f} | {e['ratio_p50']:.3f} | "
                f"{e['off_p99']:.2f} | {e['on_p99']:.2f} |"
            )
        lines += [
            "",
            "Reading it: the networks are the quality run's seed-0 DNN without and with user "
            "features (same architecture; the user vector adds 32 inputs); the trees are two "
            "LightGBM models of 200 trees each (no early stopping) without and with the learned "
            "user vector, so on/off differ by the user features only. "
            + _load(s)
            + " What resolving the user itself costs is in the next table.",
            "",
        ]
    resolver = figures_dir / "resolver.json"
    if resolver.exists():
        r = json.loads(resolver.read_text())
        lines += [
            "## Resolving a user: cost per request",
            "",
            "One asyncio loop, redis-server on loopback, timings in microseconds per call "
            "(ratio = p50 / bare HGET p50). Default settings: 10 ms deadline, 30 s cache TTL. "
            + _load(r),
            "",
            "| what | p50 µs | p99 µs | x bare HGET | answers |",
            "| --- | ---: | ---: | ---: | --- |",
            *r["rows"],
            "",
        ]
    return "\n".join(lines)
