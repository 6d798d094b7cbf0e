"""Interleaving vs A/B with trained model versions instead of the simulator's parametrised ones.

The `simulate` part sets how alike two versions are by `rho`, the correlation of their errors.
Here the versions are LightGBM LambdaMART models trained on the simulator's data, so how alike
they are is whatever training makes them. The experiments serve the queries of the data's test
split (lists of 10, each with its user and graded labels) with the same team-draft, A/B, credit
and statistics code as the `simulate` part (trainer.experiments.simulated.simulate_experiment);
true NDCG@10 is measured on those same lists.

Two kinds of pair, each a candidate better by about DELTA_NDCG true NDCG@10:
- an older version of the same training (the model after fewer boosting rounds);
- a version trained on fewer queries (the same configuration, a random share of the queries).
The control of each pair is the one of its ladder whose gap to the candidate is nearest
DELTA_NDCG.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DELTA_NDCG = 0.02
# 520,000 lists of 10: 12 % to train on, 86 % served in the experiments. The served pool must
# be large: a user's lists are fixed, so once an experiment has seen every user's lists many
# times, more impressions no longer shrink A/B's variance over users (a first run with 48,000
# lists and 100,000 users left 43 of 50 A/B experiments undecided at 3M impressions).
ROWS = 5_200_000
USERS = 1_000_000
SPLIT = (0.12, 0.02, 0.86)
TREES = 200
ROUND_LADDER = (2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 70, 100)
SHARE_LADDER = (0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2)


def fit_lambdarank(
    train: Any, queries: np.ndarray, n_trees: int, seed: int, threads: int = 2
) -> Any:
    """LightGBM LambdaMART (31 leaves, learning rate 0.1) on the training lists `queries`."""
    import lightgbm as lgb

    off = train.group_offsets
    rows = np.concatenate([np.arange(off[q], off[q + 1]) for q in queries])
    data = lgb.Dataset(train.features[rows], train.labels[rows], group=np.diff(off)[queries])
    params = {
        "objective": "lambdarank",
        "learning_rate": 0.1,
        "num_leaves": 31,
        "min_data_in_leaf": 50,
        "seed": seed,
        "verbose": -1,
        "num_threads": threads,
    }
    return lgb.train(params, data, num_boost_round=n_trees)


def _served_world(test: Any, user_ids: np.ndarray, scores: dict[str, np.ndarray]) -> Any:
    """An OnlineWorld whose pool is the test split's lists and whose versions are `scores`
    (float64 [Q, 10] by name)."""
    from trainer.experiments.simulated import OnlineWorld, QueryBatch
    from trainer.simulate.clicks import ClickModel
    from trainer.simulate.config import SimulationConfig

    class ServedWorld(OnlineWorld):
        def __init__(self) -> None:  # the pool is given, not drawn
            config = SimulationConfig()
            self.clicks = ClickModel(config.eta, config.click_noise, config.logging_noise)
            self.length = 10
            q = test.group_offsets.size - 1
            names, user_index = np.unique(user_ids, return_inverse=True)
            self.user_ids = names
            labels = test.labels.reshape(q, 10).astype(np.int64)
            self.pool = QueryBatch(np.arange(q), user_index, labels, np.zeros((q, 10)))
            self.propensity = None
            self._discount = 1.0 / np.log2(np.arange(2, 12))
            self._ideal = (2.0 ** np.sort(labels, axis=1)[:, ::-1] - 1.0) @ self._discount

        def order(self, ranker: Any) -> np.ndarray:
            return np.argsort(-scores[ranker], axis=1, kind="stable")

    return ServedWorld()


def _nearest(world: Any, names: list[str], candidate: str) -> tuple[str, dict[str, float]]:
    """The control among `names` whose true NDCG@10 gap to the candidate is nearest
    DELTA_NDCG, and every name's NDCG@10."""
    ndcg = {n: world.true_ndcg(world.order(n)) for n in [*names, candidate]}
    best = min(names, key=lambda n: abs(ndcg[candidate] - ndcg[n] - DELTA_NDCG))
    return best, ndcg


def run(experiments: int = 50, cap: int = 3_000_000) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from trainer.data.loader import load_dataset
    from trainer.experiments.simulated import DECIDE_TEST, simulate_experiment
    from trainer.simulate import SimulationConfig, simulate

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config = SimulationConfig(
            rows=ROWS, users=USERS, seed=0, docs_per_query=(10, 10), split=SPLIT
        )
        simulate(config, Path(tmp))
        train = load_dataset(Path(tmp) / "train.parquet")
        test = load_dataset(Path(tmp) / "test.parquet")
        user_of_row = pq.read_table(Path(tmp) / "test.parquet", columns=["user_id"])
        user_ids = user_of_row.column("user_id").to_numpy()[test.group_offsets[:-1]]
    q_train = np.arange(train.group_offsets.size - 1)
    n_test = test.group_offsets.size - 1
    candidate_model = fit_lambdarank(train, q_train, TREES, 1)
    scores: dict[str, np.ndarray] = {
        "candidate": candidate_model.predict(test.features, num_threads=2).reshape(n_test, 10)
    }
    for rounds in ROUND_LADDER:
        s = candidate_model.predict(test.features, num_iteration=rounds, num_threads=2)
        scores[f"rounds {rounds}"] = s.reshape(n_test, 10)
    rng = np.random.default_rng(7)
    for share in SHARE_LADDER:
        some = rng.choice(q_train, size=max(int(share * q_train.size), 20), replace=False)
        s = fit_lambdarank(train, np.sort(some), TREES, 2).predict(test.features, num_threads=2)
        scores[f"share {share}"] = s.reshape(n_test, 10)
    world = _served_world(test, user_ids, scores)
    trained_s = time.perf_counter() - started
    pairs = []
    for kind, names in (
        ("the same training after fewer boosting rounds", [f"rounds {r}" for r in ROUND_LADDER]),
        ("trained on a share of the queries", [f"share {s}" for s in SHARE_LADDER]),
    ):
        control, ndcg = _nearest(world, names, "candidate")
        order_c, order_t = world.order(control), world.order("candidate")
        traces = []
        for i in range(experiments):
            t = simulate_experiment(world, control, "candidate", 1000 + i, max_impressions=cap)
            traces.append(t)
            print(f"trained, {kind}: {i + 1}/{experiments} {t.interleave_valid} vs {t.ab_valid}")
        il = [
            cap if t.tests_valid[DECIDE_TEST] is None else t.tests_valid[DECIDE_TEST]
            for t in traces
        ]
        ab = [cap if t.ab_valid is None else t.ab_valid for t in traces]
        pairs.append(
            {
                "kind": kind,
                "control": control,
                "ndcg10": {"control": ndcg[control], "candidate": ndcg["candidate"]},
                "ladder_ndcg10": {n: ndcg[n] for n in names},
                "top1_same": float((order_c[:, 0] == order_t[:, 0]).mean()),
                "top3_same": float((order_c[:, :3] == order_t[:, :3]).all(axis=1).mean()),
                "interleave_median": float(np.median(il)),
                "ab_median": float(np.median(ab)),
                "interleave_censored": sum(t.tests_valid[DECIDE_TEST] is None for t in traces),
                "ab_censored": sum(t.ab_valid is None for t in traces),
                "interleave_right": sum(t.interleave_sign > 0 for t in traces),
                "ab_right": sum(t.ab_sign > 0 for t in traces),
                "interleave_each": il,
                "ab_each": ab,
            }
        )
    return {
        "rows": ROWS,
        "users": USERS,
        "split": SPLIT,
        "lists_served": int(n_test),
        "trees": TREES,
        "experiments": experiments,
        "cap": cap,
        "pairs": pairs,
        "training_seconds": trained_s,
        "seconds": time.perf_counter() - started,
    }


def render(r: dict[str, Any]) -> list[str]:
    lines = [
        "### Trained versions instead of parametrised ones",
        "",
        f"LightGBM LambdaMART ({r['trees']} trees, 31 leaves, learning rate 0.1) trained on "
        f"the simulator's data ({r['rows']:,} rows in lists of 10 from {r['users']:,} users; "
        "train / validation / test "
        f"shares {r['split']}); the experiments serve the test split's {r['lists_served']:,} "
        "lists (each with its user and graded labels; true NDCG@10 measured on them) with the "
        "same team-draft, A/B, credit and statistics code as above. The candidate is the "
        "model trained on all the training queries; the control is, of a ladder of older "
        "or smaller versions, the one whose true NDCG@10 is nearest 0.02 below it. "
        f"{r['experiments']} experiments per pair (seeds 1000-{999 + r['experiments']}), "
        "medians.",
        "",
        "| control | NDCG@10 control → candidate | top result the same | top 3 the same | "
        "interleaving: median impressions | A/B: median impressions | decided for the better "
        "model (interleaving, A/B) | **A/B ÷ interleaving** |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for p in r["pairs"]:
        n = p["ndcg10"]
        censored = f" ({p['ab_censored']} censored)" if p["ab_censored"] else ""
        lines.append(
            f"| {p['kind']} (`{p['control']}`) | {n['control']:.4f} → {n['candidate']:.4f} "
            f"(+{n['candidate'] - n['control']:.4f}) | {100 * p['top1_same']:.0f} % | "
            f"{100 * p['top3_same']:.0f} % | {p['interleave_median']:,.0f} | "
            f"{p['ab_median']:,.0f}{censored} | {p['interleave_right']} / {r['experiments']}, "
            f"{p['ab_right']} / {r['experiments']} | "
            f"**{p['ab_median'] / p['interleave_median']:.1f}×** |"
        )
    per_list = ", ".join(
        f"{p['ab_median'] / r['lists_served']:.1f} ({p['control']})" for p in r["pairs"]
    )
    return [
        *lines,
        "",
        "A/B's unit is the user, and each user's lists here are fixed: once an experiment has "
        "served every list many times, more impressions stop shrinking A/B's variance, which "
        "is why the served pool is large (A/B's median experiment served each list "
        f"{per_list} times on average). A censored A/B run counts as the cap "
        f"({r['cap']:,}), so its median is then a lower bound. The trained versions agree on "
        "the top result about as often as the simulator's versions at rho 0.8-0.9 above.",
        "",
        f"Time: {r['seconds']:.0f} s (training and scoring {r['training_seconds']:.0f} s).",
        "",
    ]
