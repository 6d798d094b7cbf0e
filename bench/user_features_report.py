"""bench/results/user_features.md from the figures bench.bench_user_features wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.user_features_quality import ROWS

GENERATOR_TITLES = {
    "simulate": "`ltr simulate` (scheme A: the shipped country, age, price_level; B: reversed)",
    "combo": "bench.generate_personal, combination effects (A: country, device, price_level, "
    "age; B: age, price_level, device, country)",
}


def _quality_table(figures: dict[str, Any]) -> list[str]:
    runs = figures["runs"]
    lines = [
        f"### {GENERATOR_TITLES[figures['generator']]}",
        "",
        f"{len(runs)} seeds; test queries per seed {runs[0]['queries'][2]}. NDCG@10 on the "
        "test split, mean ± sd over seeds, then each seed's value.",
        "",
        "| model | test NDCG@10 | per seed | train s (mean) |",
        "| --- | ---: | --- | ---: |",
    ]
    for key, title in ROWS:
        values = [r["ndcg"][key] for r in runs if key in r["ndcg"]]
        if not values:
            continue
        secs = np.mean([r["seconds"][key] for r in runs if key in r["seconds"]])
        per = ", ".join(f"{v:.4f}" for v in values)
        lines.append(
            f"| {title} | {np.mean(values):.4f} ± {np.std(values):.4f} | {per} | {secs:.0f} |"
        )
    lines.append("")
    for kind in ("dnn_clusters", "dnn_user"):
        gaps = [abs(r["ndcg"][f"{kind}_A"] - r["ndcg"][f"{kind}_B"]) for r in runs]
        lines.append(
            f"- |order A − order B|, {kind.replace('_', ' ')}: mean {np.mean(gaps):.4f}, "
            f"max {np.max(gaps):.4f}"
        )
    lift = [r["ndcg"]["dnn_user_A"] - r["ndcg"]["dnn_onehot"] for r in runs]
    lines.append(
        "- DNN + user features − DNN + one-hot (order A): " + ", ".join(f"{v:+.4f}" for v in lift)
    )
    lines.append("")
    return lines


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
        "per cluster id or field value. Trees: LightGBM lambdarank, 31 leaves, lr 0.05, up to "
        "300 trees, early stop 30. One-hot: one column per bucketised token of the scheme's "
        "fields (the same information the clusters see).",
        "",
    ]
    for name in ("simulate", "combo"):
        path = figures_dir / f"quality_{name}.json"
        if path.exists():
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
            "user vector, so on/off differ by the user features only. The machine was loaded "
            "(load average 10-20 on 2 cores), so p50s are several times a quiet run's; what "
            "resolving the user itself costs is in the next table (~8 µs in-process).",
            "",
        ]
    resolver = figures_dir / "resolver.json"
    if resolver.exists():
        lines += [
            "## Resolving a user: cost per request",
            "",
            "One asyncio loop, redis-server on loopback, timings in microseconds per call "
            "(ratio = p50 / bare HGET p50). Default settings: 10 ms deadline, 30 s cache TTL.",
            "",
            "| what | p50 µs | p99 µs | x bare HGET | answers |",
            "| --- | ---: | ---: | ---: | --- |",
            *json.loads(resolver.read_text()),
            "",
        ]
    return "\n".join(lines)
