"""Exploration: how much does swapping the first result (app.api.exploration, RandPair) on a
share of answers help the position-bias estimate on one fixed ranker's logs?

A fixed logging ranker serves head queries again and again (each query's list in the same
order, as a deployed model does), with the service's own `Exploration` swapping the first
result on `--shares` of the answers. Each document has two logged features (a relevance
signal and noise) and a hidden part of its relevance that the ranker knows and the features
do not (what a production ranker learned from signals the log lacks). Clicks follow the
position-based model, theta_k = 1/k. The logs are written in the service's format
(app.impressions records) and read back through `trainer.clicks` (read_logs, join_logs), and
theta is estimated as `ltr dataset` does (`estimate_from_dataset`: the explored answers'
RandPair ratios, trainer.clicks.randpair, with regression-EM past them), by regression-EM
alone (what it did before exploration) and by plain EM over (query, document) pairs
(`relevance="pairs"`). Reported: the mean relative
error of theta at positions 2..10 against the truth, per share, over `--seeds`.

Run: .venv/bin/python -m bench.bench_exploration [--queries 300 --impressions 40000]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from app.api.exploration import Exploration
from app.impressions.sink import feedback_record, impression_record, to_json
from trainer.clicks.join import join_logs
from trainer.clicks.logs import read_logs
from trainer.clicks.propensity import estimate_from_dataset, estimate_propensities

DOCS = 10


def simulate(
    queries: int,
    impressions: int,
    share: float,
    depth: int,
    seed: int,
    path: Path,
    hidden_scale: float = 1.0,
) -> np.ndarray:
    """Writes the service's log of `impressions` answers to `path`; the true theta [DOCS]."""
    world = np.random.default_rng(seed)
    signal = world.normal(size=(queries, DOCS)).astype(np.float32)
    noise = world.normal(size=(queries, DOCS)).astype(np.float32)
    hidden = hidden_scale * world.normal(size=(queries, DOCS))
    relevance = 1.0 / (1.0 + np.exp(-(1.5 * signal + hidden - 1.5)))
    ranked = np.argsort(-(signal + hidden + 0.3 * world.normal(size=(queries, DOCS))), axis=1)
    theta = 1.0 / np.arange(1, DOCS + 1)
    traffic = np.random.default_rng(seed + 1000)
    exploration = Exploration(share, depth, np.random.default_rng(seed + 2000))
    lines: list[bytes] = []
    for r in range(impressions):
        q = int(traffic.integers(queries))
        order = ranked[q].copy()
        explored = exploration.swap(order)
        ids = [f"q{q}-d{d}" for d in order.tolist()]
        rows = np.stack([signal[q, order], noise[q, order]], axis=1)
        ts = 1_000_000.0 + r
        record = impression_record(
            f"r{r}", f"q{q}", None, None, "m", "v1", ids, rows, ts=ts, explored=explored
        )
        lines.append(to_json(record))
        clicked = traffic.random(DOCS) < theta * relevance[q, order]
        if clicked.any():
            events = [
                {"id": ids[i], "type": "click", "value": None} for i in np.flatnonzero(clicked)
            ]
            lines.append(to_json(feedback_record(f"r{r}", events, ts=ts + 1)))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return theta


def errors(path: Path, theta: np.ndarray) -> tuple[dict[str, float], bool]:
    """Mean relative errors by estimator, and whether `ltr dataset` kept EM's theta."""
    data = join_logs(read_logs(path)).dataset
    assert data.positions is not None
    estimate = estimate_from_dataset(data)  # what `ltr dataset` writes
    served = estimate.theta[:DOCS]
    em_alone = estimate_from_dataset(replace(data, explored=None)).theta[:DOCS]
    # One key per (query, document): the joined rows carry no ids, but each document's logged
    # signal is a continuous draw of its own, so it names the document.
    keys = np.unique(data.features[:, 0], return_inverse=True)[1]
    clicks = (data.labels > 0).astype(np.int8)
    pairs = estimate_propensities(data.positions, clicks, keys=keys, relevance="pairs").theta
    truth = theta[1:DOCS]
    found = {
        name: float(np.mean(np.abs(theta_hat[1:DOCS] - truth) / truth))
        for name, theta_hat in (("ltr dataset", served), ("em alone", em_alone), ("pairs", pairs))
    }
    randpair = estimate.randpair or {}
    return found, bool(randpair.get("em_consistent", True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--impressions", type=int, default=40_000)
    parser.add_argument("--shares", default="0,0.02,0.05,0.1,0.2")
    parser.add_argument("--depth", type=int, default=DOCS)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    shares = [float(s) for s in args.shares.split(",")]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}")
    print(
        f"{args.queries} queries x {DOCS} documents, {args.impressions:,} answers, depth "
        f"{args.depth}, theta_k = 1/k; mean relative error of theta at positions 2..{DOCS}"
    )
    scenarios = (
        (1.0, "the ranker knows relevance the logged features lack"),
        (0.0, "the logged features hold all the ranker knew"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        for hidden_scale, scenario in scenarios:
            print(f"\n{scenario}:\n")
            print(
                "| share explored | `ltr dataset` (RandPair ratios + regression-EM) "
                "| EM's theta kept | regression-EM alone | pairs EM alone | seconds |"
            )
            print("|---:|---:|---:|---:|---:|---:|")
            for share in shares:
                started = time.perf_counter()
                found: dict[str, list[float]] = {"ltr dataset": [], "em alone": [], "pairs": []}
                kept = 0
                for seed in range(args.seeds):
                    path = Path(tmp) / f"log-{hidden_scale}-{share}-{seed}.jsonl"
                    theta = simulate(
                        args.queries, args.impressions, share, args.depth, seed, path, hidden_scale
                    )
                    values, em_kept = errors(path, theta)
                    kept += em_kept
                    for name, value in values.items():
                        found[name].append(value)
                cells = [
                    f"{100 * np.mean(v):.1f} % ± {100 * np.std(v):.1f}" for v in found.values()
                ]
                cells.insert(1, f"{kept} of {args.seeds}")
                seconds = time.perf_counter() - started
                print(f"| {share:g} | {' | '.join(cells)} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
