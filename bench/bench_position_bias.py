"""Position bias: does debiased LambdaMART on clicks get back to what true labels give?

1. `ltr simulate --clicks` data (position-based click model with known theta_k = (1/k)^eta).
   Each training query is served `--sessions` times (trainer.simulate.sessions, what
   `ltr simulate --clicks --sessions N` writes): session 0 is the simulator's own log, the
   others replay its logging ranker and click model with fresh noise, as head queries come
   back in real traffic.
2. Every session is written in the service's log format (app.impressions records: impressions
   + click feedback, JSONL) and read back through `trainer.clicks` (read_logs, join_logs).
3. Propensities by EM (trainer.clicks.propensity) vs the true theta, per position.
4. NDCG@10 on the TRUE relevance of the test split for native LambdaMART trained on
   (a) true labels, (b) naive clicks, (c) debiased clicks: IPW lambdas with the estimated
   propensities + the discount fitted to CTR by position; (c4) Hu et al. 2019's pairwise
   debiasing (lambdamart.pairwise_debias, position ratios learned while boosting, no EM);
   (c5) LightGBM's additive position-bias factors in the native trainer as `--debias
   position-bias` trains them (lambdamart.position_bias_factors, no EM: a full Newton step
   for the factors and per-query lambda normalisation); c5a: with LightGBM's own step (the
   learning rate) and no normalisation; c5b: full step, no normalisation;
   (c7) the position-based click model's likelihood boosted directly, theta from EM
   (lambdamart.click_likelihood, `--debias click-model`, the default; c7b: theta re-estimated
   while boosting; c7c: lists without a click left out; c7d: the true theta);
   (c8) the command-line path: the logs split by time (latest 20 % validate), EM on the
   rest, `ltr train --unbiased --debias D` with early stopping on the IPW DCG@10 of the
   validation clicks (clicks.ipw_eval), for D = click-model, ipw (c8b), position-bias (c8c);
   plus ablations (suffixes _trunc30, _norm, _trunc30_norm: LightGBM's pair truncation at
   rank 30 and per-query lambda normalisation on b, c1, c5, c5b) and, side by side,
   LightGBM lambdarank on the same click lists with and without its own position-bias
   correction (`position` in the Dataset).

Run: .venv/bin/python -m bench.bench_position_bias [--rows 100000 --sessions 8 --trees 100]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from trainer.clicks.ipw_eval import ipw_relabel
from trainer.clicks.join import join_logs, split_by_time
from trainer.clicks.logs import read_logs
from trainer.clicks.propensity import (
    estimate_from_dataset,
    estimate_propensities,
    write_propensities,
)
from trainer.data.dataset import RankingDataset
from trainer.data.parquet import read_parquet
from trainer.lambdamart.booster import train
from trainer.lambdamart.click_likelihood import ClickLikelihoodObjective
from trainer.lambdamart.debias_choice import click_objective
from trainer.lambdamart.lambdas import LambdaObjective
from trainer.lambdamart.pairwise_debias import PairwiseDebiasObjective
from trainer.lambdamart.params import LambdaMARTParams
from trainer.lambdamart.position_bias_factors import PositionBiasObjective
from trainer.lambdamart.unbiased import (
    UnbiasedObjective,
    fit_power_discount,
    ipw_weights,
    power_discount,
)
from trainer.metrics.ndcg import mean_ndcg
from trainer.simulate import SimulationConfig, simulate
from trainer.simulate.sessions import write_session_logs

REPORT_POSITIONS = 20


def fit_native(
    data: RankingDataset,
    params: LambdaMARTParams,
    test: RankingDataset,
    objective: LambdaObjective | None = None,
) -> tuple[np.ndarray, float]:
    from app.scoring.reference import predict

    started = time.perf_counter()
    result = train(data, params, objective=objective)
    seconds = time.perf_counter() - started
    scores = predict(result.ensemble, test.features)
    return np.asarray(scores, dtype=np.float64), seconds


def fit_lightgbm(
    data: RankingDataset, params: LambdaMARTParams, test: RankingDataset, positions: bool
) -> tuple[np.ndarray, float]:
    import lightgbm as lgb

    started = time.perf_counter()
    dataset = lgb.Dataset(
        data.features,
        data.labels,
        group=data.group_sizes,
        position=data.positions - 1 if positions and data.positions is not None else None,
        params={"verbose": -1, "max_bin": params.max_bin},
    )
    config = {
        "objective": "lambdarank",
        "num_leaves": params.num_leaves,
        "learning_rate": params.learning_rate,
        "min_data_in_leaf": params.min_data_in_leaf,
        "verbose": -1,
        "num_threads": 1,
        "seed": params.seed,
    }
    booster = lgb.train(config, dataset, num_boost_round=params.num_trees)
    seconds = time.perf_counter() - started
    return np.asarray(booster.predict(test.features), dtype=np.float64), seconds


def expected_clicks(
    scores: np.ndarray, test: RankingDataset, theta: np.ndarray, attractiveness: np.ndarray
) -> float:
    """Mean clicks per query in the top 10 under the true click model: the metric a fitted
    discount (Meituan-Dianping 2019) aims at. theta [K], attractiveness by grade [5]."""
    total = 0.0
    for lo, hi in zip(test.group_offsets[:-1], test.group_offsets[1:], strict=True):
        top = lo + np.argsort(-scores[lo:hi], kind="stable")[:10]
        grades = test.labels[top].astype(np.int64)
        total += float(np.sum(theta[: top.size] * attractiveness[grades]))
    return total / test.num_queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--eta", type=float, default=1.0)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument(
        "--click-min-data-in-leaf",
        type=int,
        default=100,
        help="min_data_in_leaf of the runs on click logs (true-label runs: 100)",
    )
    parser.add_argument("--max-weight", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairwise-power", type=float, default=1.0, help="p of Hu et al.")
    parser.add_argument("--only", default=None, help="Comma-separated runs (default: all).")
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    args = parser.parse_args()
    out: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json"}}
    with tempfile.TemporaryDirectory(prefix="ltr-pb-") as tmp:
        sim = Path(tmp) / "sim"
        config = SimulationConfig(rows=args.rows, clicks=True, eta=args.eta, seed=args.seed)
        simulate(config, sim)
        started = time.perf_counter()
        session_logs = write_session_logs(
            sim, "parquet", args.sessions, args.seed, Path(tmp) / "log.jsonl"
        )
        truth_train, theta_true = session_logs.train, session_logs.theta
        attractiveness = session_logs.attractiveness
        log_seconds = time.perf_counter() - started
        started = time.perf_counter()
        joined = join_logs(read_logs(Path(tmp) / "log.jsonl"))
        out["log_rows"] = joined.dataset.num_docs
        out["log_write_read_seconds"] = [
            round(log_seconds, 1),
            round(time.perf_counter() - started, 1),
        ]
        test = read_parquet(sim / "test.parquet")
    logs = joined.dataset
    clicks = (logs.labels > 0).astype(np.int8)
    out["clicks"] = int(clicks.sum())
    started = time.perf_counter()
    assert logs.positions is not None
    est = estimate_propensities(logs.positions, clicks, features=logs.features)
    out["em_seconds"] = round(time.perf_counter() - started, 1)
    out["em_updates"] = est.iterations
    k = min(REPORT_POSITIONS, est.theta.size)
    out["theta_true"] = theta_true[:k].round(4).tolist()
    out["theta_est"] = est.theta[:k].round(4).tolist()
    out["ctr_relative"] = (est.ctr[:k] / est.ctr[0]).round(4).tolist()
    err = np.abs(est.theta[:k] - theta_true[:k])
    out["theta_abs_error_mean"] = round(float(err.mean()), 4)
    out["theta_rel_error_mean"] = round(float((err / theta_true[:k]).mean()), 4)
    out["ctr_rel_error_mean"] = round(
        float((np.abs(out["ctr_relative"] - theta_true[:k]) / theta_true[:k]).mean()), 4
    )
    eta = fit_power_discount(est.ctr, est.impressions)
    out["ctr_power_eta"] = round(eta, 4)
    clicked = logs.subset_queries(
        np.flatnonzero(np.add.reduceat(clicks, logs.group_offsets[:-1]) > 0)
    )
    out["train_lists"] = {
        "true_labels": truth_train.num_queries,
        "click_lists": clicked.num_queries,
    }
    # One row per document for the true labels; a click-log row
    # repeats its document once per session, so click runs may ask for more rows per leaf.
    truth_params = LambdaMARTParams(
        num_trees=args.trees, num_leaves=15, min_data_in_leaf=100, eval_at=10, threads=1
    )
    params = truth_params.model_copy(update={"min_data_in_leaf": args.click_min_data_in_leaf})
    assert clicked.positions is not None
    weights = ipw_weights(clicked.positions, est.theta, args.max_weight)
    weights_true = ipw_weights(clicked.positions, theta_true, args.max_weight)
    max_len = int(clicked.group_sizes.max())
    discount = power_discount(eta, max_len)

    def unbiased(w: np.ndarray | None, d: np.ndarray | None, **options: Any) -> UnbiasedObjective:
        return UnbiasedObjective(clicked.labels, clicked.group_offsets, w, d, eval_at=10, **options)

    def pairwise(name: str, **options: Any) -> tuple[np.ndarray, float]:
        if not options:  # what `ltr train --unbiased --debias pairwise` trains with
            objective = click_objective(clicked, params, None, debias="pairwise")
        else:
            assert clicked.positions is not None
            objective = PairwiseDebiasObjective(
                clicked.labels, clicked.group_offsets, clicked.positions, eval_at=10, **options
            )
        fitted = fit_native(clicked, params, test, objective)
        for side in ("t_plus", "t_minus"):
            ratios = [round(t, 4) for t in objective.description[side]]
            out.setdefault("pairwise_ratios", {}).setdefault(name, {})[side] = ratios
        return fitted

    def position_bias(
        name: str, step: float | None = None, **options: Any
    ) -> tuple[np.ndarray, float]:
        if (
            step is None and not options
        ):  # what `ltr train --unbiased --debias position-bias` trains with
            objective = click_objective(clicked, params, None, debias="position-bias")
        else:
            assert clicked.positions is not None
            objective = PositionBiasObjective(
                clicked.labels,
                clicked.group_offsets,
                clicked.positions,
                params.learning_rate if step is None else step,
                eval_at=10,
                **options,
            )
        fitted = fit_native(clicked, params, test, objective)
        bias = [round(b, 4) for b in objective.description["position_bias"]]
        out.setdefault("position_bias", {})[name] = bias
        return fitted

    def click_likelihood(
        data: RankingDataset, theta: np.ndarray, learn: bool
    ) -> tuple[np.ndarray, float]:
        assert data.positions is not None
        objective = ClickLikelihoodObjective(
            data.labels, data.group_offsets, data.positions, theta, learn, eval_at=10
        )
        return fit_native(data, params, test, objective)

    def cli_path(debias: str) -> tuple[np.ndarray, float]:
        """What `ltr dataset --from-logs` (latest 20 % of the lists validate, EM on the rest)
        then `ltr train --unbiased --debias D --valid valid.parquet --early-stopping 30` do:
        up to 3x the trees, stopped on the IPW DCG@10 of the validation clicks."""
        train_part, valid_part = split_by_time(joined, valid_fraction=0.2)
        estimate = estimate_from_dataset(train_part.dataset)
        es_params = params.model_copy(
            update={"num_trees": 3 * args.trees, "early_stopping_rounds": 30}
        )
        with tempfile.TemporaryDirectory(prefix="ltr-pb-cli-") as where:
            path = Path(where) / "propensities.json"
            write_propensities(path, estimate)
            objective = click_objective(train_part.dataset, es_params, path, debias=debias)  # type: ignore[arg-type]
        valid = ipw_relabel(valid_part.dataset, estimate.theta)
        started = time.perf_counter()
        result = train(
            train_part.dataset, es_params, valid, objective=objective, valid_metric="dcg"
        )
        seconds = time.perf_counter() - started
        out.setdefault("cli_path_best_iteration", {})[debias] = result.best_iteration
        from app.scoring.reference import predict

        return np.asarray(predict(result.ensemble, test.features), dtype=np.float64), seconds

    runs = {
        "a_true_labels": lambda: fit_native(truth_train, truth_params, test),
        "b_naive_clicks": lambda: fit_native(clicked, params, test),
        "c_ipw_fitted_discount": lambda: fit_native(
            clicked, params, test, unbiased(weights, discount)
        ),
        "c1_ipw_only": lambda: fit_native(clicked, params, test, unbiased(weights, None)),
        "c2_ipw_true_theta": lambda: fit_native(
            clicked, params, test, unbiased(weights_true, None)
        ),
        "c3_fitted_discount_only": lambda: fit_native(
            clicked, params, test, unbiased(None, discount)
        ),
        "c4_pairwise_debias": lambda: pairwise("c4_pairwise_debias"),
        "c4b_pairwise_12_positions": lambda: pairwise(
            "c4b_pairwise_12_positions", max_position=12, power=args.pairwise_power
        ),
        "c4c_pairwise_clicked_side_only": lambda: pairwise(
            "c4c_pairwise_clicked_side_only", non_clicks=False, power=args.pairwise_power
        ),
        "c4d_pairwise_power": lambda: pairwise("c4d_pairwise_power", power=args.pairwise_power),
        "c5_position_bias_factors": lambda: position_bias("c5_position_bias_factors"),
        "c5a_position_bias_lightgbm_step": lambda: position_bias(
            "c5a_position_bias_lightgbm_step", params.learning_rate
        ),
        "c5b_position_bias_full_step": lambda: position_bias("c5b_position_bias_full_step", 1.0),
        "c7_click_likelihood": lambda: click_likelihood(logs, est.theta, False),
        "c7b_click_likelihood_learn_theta": lambda: click_likelihood(logs, est.theta, True),
        "c7c_click_likelihood_clicked_lists": lambda: click_likelihood(clicked, est.theta, False),
        "c7d_click_likelihood_true_theta": lambda: click_likelihood(logs, theta_true, False),
        "c8_cli_click_model": lambda: cli_path("click-model"),
        "c8b_cli_ipw": lambda: cli_path("ipw"),
        "c8c_cli_position_bias": lambda: cli_path("position-bias"),
        "lightgbm_true_labels": lambda: fit_lightgbm(truth_train, truth_params, test, False),
        "lightgbm_naive_clicks": lambda: fit_lightgbm(clicked, params, test, False),
        "lightgbm_position_debiased": lambda: fit_lightgbm(clicked, params, test, True),
    }
    # LightGBM's lambdas (issue 6): pairs with one document in the current top 30
    # (lambdarank_truncation_level) and/or each query's lambdas scaled by log2(1 + S) / S
    # (lambdarank_norm).
    variants: dict[str, dict[str, Any]] = {
        "trunc30": {"ndcg_truncation": 30},
        "norm": {"normalize": True},
        "trunc30_norm": {"ndcg_truncation": 30, "normalize": True},
    }

    def native_variant(w: np.ndarray | None, opts: dict[str, Any]) -> tuple[np.ndarray, float]:
        return fit_native(clicked, params, test, unbiased(w, None, **opts))

    for tag, opts in variants.items():
        runs[f"b_naive_{tag}"] = partial(native_variant, None, opts)
        runs[f"c1_ipw_{tag}"] = partial(native_variant, weights, opts)
        runs[f"c5_position_bias_{tag}"] = partial(
            position_bias, f"c5_position_bias_{tag}", None, **opts
        )
        runs[f"c5b_position_bias_full_step_{tag}"] = partial(
            position_bias, f"c5b_position_bias_full_step_{tag}", 1.0, **opts
        )
    if args.only:
        wanted = {"a_true_labels", "b_naive_clicks", *args.only.split(",")}
        runs = {name: run for name, run in runs.items() if name in wanted}
    out["ndcg10"], out["train_seconds"] = {}, {}
    for name, run in runs.items():
        scores, seconds = run()
        ndcg = mean_ndcg(scores, test.labels, test.group_offsets, 10, 1.0)
        out["ndcg10"][name] = round(ndcg, 4)
        clicks_10 = expected_clicks(scores, test, theta_true, attractiveness)
        out.setdefault("expected_clicks10", {})[name] = round(clicks_10, 4)
        out["train_seconds"][name] = round(seconds, 1)
        print(
            f"{name:28s} NDCG@10 {ndcg:.4f}  E[clicks@10] {clicks_10:.4f}  ({seconds:.1f} s)",
            flush=True,
        )
    n = out["ndcg10"]
    gap = n["a_true_labels"] - n["b_naive_clicks"]
    for name in n:
        if not name.startswith(("b", "c")):
            continue
        share = (n[name] - n["b_naive_clicks"]) / gap if gap > 0 else float("nan")
        out.setdefault("gap_recovered", {})[name] = round(share, 3)
    lgb_runs = ("lightgbm_true_labels", "lightgbm_naive_clicks", "lightgbm_position_debiased")
    if all(name in n for name in lgb_runs):
        top, low, mid = (n[name] for name in lgb_runs)
        share = (mid - low) / (top - low) if top > low else float("nan")
        out.setdefault("gap_recovered", {})["lightgbm_position_debiased"] = round(share, 3)
    print(json.dumps(out, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
