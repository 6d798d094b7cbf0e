"""Unbiased LambdaMART on click labels: inverse-propensity-weighted lambdas and a position
discount fitted to observed click-through (seed 002).

IPW (Wang et al. 2016/2018, Joachims et al. 2017): the propensities come from a separate EM fit
(trainer.clicks.propensity) and stay fixed while boosting. `click_objective` also builds the
other debiasing objectives: the click model's likelihood (`debias="click-model"`, the default,
lambdamart.click_likelihood), position-bias factors (lambdamart.position_bias_factors) and Hu
et al. 2019's pairwise debiasing (lambdamart.pairwise_debias). The click model and the factors
measured better than IPW over five simulated datasets (bench/results/position_bias.md).

A click at position k is evidence of relevance discounted by the chance theta_k that position k
was examined at all, so each clicked document's gain is weighted by w = 1 / theta_k:
`sum_i c_i / theta_{k_i} * D(rank_i)` is an unbiased estimate of the DCG of relevance under the
position-based model. The lambdas are LambdaRank's on that estimate: for a (clicked, not clicked)
pair |delta| = w_clicked * |delta D|, exactly the pairwise IPW weight. Each query is still
normalised by the ideal DCG of its unweighted labels: normalising by the weighted ideal would
cancel the weight of every single-click query.

The discount D replaces 1/log2(1 + rank) in delta NDCG when `discount` is given, e.g.
`power_discount(fit_power_discount(ctr))`, the power law k^-eta fitted to click-through by
position. It must be positive and non-increasing (the kernel relies on it).

LambdaObjective's numba kernels do the work; only the gains, the discount and the normalisers
change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.lambdamart.lambdas import LambdaObjective
from trainer.lambdamart.params import LambdaMARTParams

DISCOUNTS = ("log2", "ctr", "theta")
DEBIAS = ("ipw", "pairwise", "position-bias", "click-model")
Debias = Literal["ipw", "pairwise", "position-bias", "click-model"]


def ipw_weights(
    positions: np.ndarray, propensities: np.ndarray, max_weight: float | None = None
) -> np.ndarray:
    """1 / theta[position - 1] per document: float64 [n_docs] for 1-based positions [n_docs];
    positions past the end of `propensities` [K] take its last value; clipped to max_weight."""
    theta = np.asarray(propensities, dtype=np.float64)
    if theta.ndim != 1 or theta.size == 0 or np.any(~(theta > 0)):
        raise ValueError("propensities must be a non-empty 1-D array of positive numbers")
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size and pos.min() < 1:
        raise ValueError("positions must be 1-based")
    weights = 1.0 / theta[np.minimum(pos, theta.size) - 1]
    return weights if max_weight is None else np.minimum(weights, max_weight)


def fit_power_discount(curve: np.ndarray, counts: np.ndarray | None = None) -> float:
    """eta of the power law curve_k / curve_1 ~ k^-eta, least squares in log space, each
    position weighted by its impressions `counts` [K] (positions with no clicks left out)."""
    values = np.asarray(curve, dtype=np.float64)
    w = np.ones_like(values) if counts is None else np.asarray(counts, dtype=np.float64)
    ok = np.isfinite(values) & (values > 0) & (w > 0)
    if not ok[0] or ok.sum() < 2:
        raise ValueError("need a positive value at position 1 and at one more position")
    x = np.log(np.arange(1, values.size + 1)[ok])
    y = np.log(values[ok] / values[0])
    eta = -float(np.sum(w[ok] * x * y) / np.sum(w[ok] * x * x))  # through the origin
    return max(eta, 0.0)


def power_discount(eta: float, n: int) -> np.ndarray:
    """k^-eta for ranks 1..n: float64 [n]."""
    return np.arange(1, n + 1, dtype=np.float64) ** -eta


class UnbiasedObjective(LambdaObjective):
    """LambdaObjective with per-document gain weights [n_docs] (IPW) and/or a discount [>= 1]
    for ranks 1.. (padded with its last value). `compute` reports NDCG@eval_at on the
    unweighted labels with the standard discount, as LambdaObjective does. `normalize` scales
    each query's lambdas and hessians as LightGBM's `lambdarank_norm` does (`query_norm`); off
    by default: it undoes much of the IPW weighting (bench/results/position_bias.md)."""

    def __init__(
        self,
        labels: np.ndarray,
        group_offsets: np.ndarray,
        weights: np.ndarray | None = None,
        discount: np.ndarray | None = None,
        sigma: float = 1.0,
        ndcg_truncation: int | None = None,
        max_pairs_rank: int | None = None,
        eval_at: int = 0,
        empty_value: float = 1.0,
        normalize: bool = False,
    ) -> None:
        super().__init__(
            labels, group_offsets, sigma, ndcg_truncation, max_pairs_rank, eval_at, empty_value
        )
        self.normalize = bool(normalize)
        max_len = int(np.diff(self.offsets).max())
        trunc = max_len if ndcg_truncation is None else int(ndcg_truncation)
        if discount is not None:
            self.disc_pairs = _padded_discount(discount, max_len)
            self.disc_pairs[trunc:] = 0.0
            ideal = _ideal_dcg(self.gains, self.offsets, self.disc_pairs)
            self.inv_trunc = np.divide(
                1.0, ideal, out=np.zeros_like(ideal), where=self.active & (ideal > 0)
            )
        self.plain_gains = self.gains
        self.pair_gains = self.gains
        # What the manifest's `training` records about this objective (click_objective adds more).
        self.description: dict[str, Any] = {
            "lambdas": "ipw" if weights is not None else "plain",
            "discount": "log2" if discount is None else "custom",
        }
        if self.normalize:
            self.description["query_norm"] = "log2(1 + S) / S"
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != self.labels.shape or np.any(~(w > 0)):
                raise ValueError("weights must be positive, one per document")
            self.pair_gains = np.ascontiguousarray(self.gains * w)

    def compute(
        self, scores: np.ndarray, with_lambdas: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lambdas float64 [n_docs], hessians float64 [n_docs], NDCG@eval_at per query: the
        lambdas from the weighted gains, the NDCG from the plain ones (a second, pair-free
        pass of LambdaObjective.compute)."""
        if not with_lambdas:
            return super().compute(scores, with_lambdas=False)
        eval_at = self.eval_at
        try:
            self.gains, self.eval_at = self.pair_gains, 0
            lam, hess, ndcg = super().compute(scores)
        finally:
            self.gains, self.eval_at = self.plain_gains, eval_at
        if self.normalize:
            factor = query_norm(lam, self.offsets)
            lam, hess = lam * factor, hess * factor
        if eval_at > 0:
            ndcg = super().compute(scores, with_lambdas=False)[2]
        return lam, hess, ndcg


def query_norm(lambdas: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """LightGBM's `lambdarank_norm`: per document [n_docs], its query's log2(1 + S) / S with
    S = sum of |lambda| over the query's documents (1 where S is 0). With two label levels
    (clicks) every document's pairs push it one way, so S is LightGBM's sum, twice the pairs'
    |lambda_ij|; with more levels it is a lower bound. Queries with many large lambdas are
    damped (log), queries with little gradient keep it."""
    total = np.add.reduceat(np.abs(lambdas), offsets[:-1])
    factor = np.divide(np.log2(1.0 + total), total, out=np.ones_like(total), where=total > 0)
    return np.repeat(factor, np.diff(offsets))


def _ideal_dcg(gains: np.ndarray, offsets: np.ndarray, discount: np.ndarray) -> np.ndarray:
    """Per query: the DCG of its gains [n_docs] sorted best first under discount [max_len]."""
    query = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    order = np.lexsort((-gains, query))
    rank = np.arange(gains.size) - offsets[query]
    return np.add.reduceat(gains[order] * discount[rank], offsets[:-1])


def _padded_discount(discount: np.ndarray, n: int) -> np.ndarray:
    d = np.asarray(discount, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or np.any(~(d > 0)) or np.any(np.diff(d) > 0):
        raise ValueError("discount must be a non-empty, positive, non-increasing 1-D array")
    out = np.full(n, d[-1])
    out[: min(n, d.size)] = d[:n]
    return out


def lambdas_and_hessians(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    sigma: float = 1.0,
    ndcg_truncation: int | None = None,
    max_pairs_rank: int | None = None,
    weights: np.ndarray | None = None,
    discount: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """lambdas.lambdas_and_hessians with IPW gain weights [n_docs] and a discount [K]: float64
    lambdas and hessians [n_docs]. Positive lambda = the document should move up."""
    objective = UnbiasedObjective(
        labels, group_offsets, weights, discount, sigma, ndcg_truncation, max_pairs_rank
    )
    lam, hess, _ = objective.compute(scores)
    return lam, hess


def click_objective(
    train: RankingDataset,
    params: LambdaMARTParams,
    propensities: Path | None,
    discount: Literal["ctr", "theta", "log2"] = "log2",
    max_weight: float | None = None,
    debias: Debias = "click-model",
) -> UnbiasedObjective:
    """The objective `ltr train --unbiased [--propensities FILE]` trains with. debias
    "click-model" (default): the position-based click model's likelihood with the file's theta
    (lambdamart.click_likelihood); "position-bias": per-position score factors learned while
    boosting, no file; "ipw": IPW weights from the file's theta and the served positions of
    `train`; "pairwise": Hu et al.'s pairwise debiasing (lambdamart.pairwise_debias), which
    estimates its own position ratios and needs the file only for a ctr/theta discount. For
    the lambda-based ones (ipw, pairwise), in delta NDCG the usual 1/log2
    discount ("log2"), the power law fitted to the file's CTR by position ("ctr", seed 002) or
    the theta curve itself ("theta"). log2 is the default: on the benchmark the fitted curves
    did not help NDCG@10 (bench/results/position_bias.md)."""
    from trainer.clicks.propensity import load_propensities

    if train.positions is None:
        raise DataFormatError(
            f"{train.source}: --unbiased needs the served position of every row "
            "(a `position` column, as `ltr dataset --from-logs` writes)"
        )
    if debias == "position-bias":  # lambdamart.position_bias_factors: no file, log2 only
        if discount != "log2":
            raise DataFormatError(f"--debias position-bias --discount {discount}: use log2")
        return _position_bias(train, params)
    if debias == "click-model":  # lambdamart.click_likelihood: theta from the file, no discount
        if discount != "log2" or propensities is None:
            raise DataFormatError("--debias click-model needs propensities and --discount log2")
        return _click_model(train, params, propensities)
    if propensities is None:
        if debias == "ipw" or discount != "log2":
            raise DataFormatError(f"--debias {debias} --discount {discount} needs propensities")
        return _pairwise(train, params, None, {})
    theta, ctr = load_propensities(propensities)
    curve: np.ndarray | None = None
    longest = int(train.group_sizes.max())
    if discount == "ctr":
        if ctr is None:
            raise DataFormatError(f"{propensities}: no 'ctr' list to fit a discount to")
        try:
            curve = power_discount(fit_power_discount(ctr), longest)
        except ValueError as exc:
            raise DataFormatError(
                f"{propensities}: cannot fit a discount to 'ctr': {exc}"
            ) from None
    elif discount == "theta":
        curve = np.minimum.accumulate(theta)  # the kernel needs a non-increasing discount
    if debias == "pairwise":
        return _pairwise(
            train, params, curve, {"propensities": str(propensities), "discount": discount}
        )
    objective = UnbiasedObjective(
        train.labels,
        train.group_offsets,
        ipw_weights(train.positions, theta, max_weight),
        curve,
        sigma=params.sigma,
        ndcg_truncation=params.ndcg_truncation,
        max_pairs_rank=params.max_pairs_rank,
        eval_at=params.eval_at,
        empty_value=params.empty_query_ndcg,
    )
    objective.description.update(
        propensities=str(propensities),
        theta=[round(float(t), 6) for t in theta[:20]],
        discount=discount,
        max_weight=max_weight,
    )
    return objective


def _pairwise(
    train: RankingDataset, params: LambdaMARTParams, curve: np.ndarray | None, notes: dict[str, Any]
) -> UnbiasedObjective:
    from trainer.lambdamart.pairwise_debias import PairwiseDebiasObjective

    assert train.positions is not None
    objective = PairwiseDebiasObjective(
        train.labels,
        train.group_offsets,
        train.positions,
        curve,
        sigma=params.sigma,
        ndcg_truncation=params.ndcg_truncation,
        max_pairs_rank=params.max_pairs_rank,
        eval_at=params.eval_at,
        empty_value=params.empty_query_ndcg,
    )
    objective.description.update(notes)
    return objective


def _click_model(
    train: RankingDataset, params: LambdaMARTParams, propensities: Path
) -> UnbiasedObjective:
    from trainer.clicks.propensity import load_propensities
    from trainer.lambdamart.click_likelihood import ClickLikelihoodObjective

    assert train.positions is not None
    theta, _ = load_propensities(propensities)
    objective = ClickLikelihoodObjective(
        train.labels,
        train.group_offsets,
        train.positions,
        np.minimum(theta / theta.max(), 1.0),
        eval_at=params.eval_at,
        empty_value=params.empty_query_ndcg,
    )
    objective.description["propensities"] = str(propensities)
    return objective


def _position_bias(train: RankingDataset, params: LambdaMARTParams) -> UnbiasedObjective:
    from trainer.lambdamart.position_bias_factors import PositionBiasObjective

    assert train.positions is not None
    # A full Newton step for the factors and LightGBM's per-query lambda normalisation: both
    # measured better than LightGBM's own step (the boosting rate) over five simulated
    # datasets (bench/results/position_bias.md).
    return PositionBiasObjective(
        train.labels,
        train.group_offsets,
        train.positions,
        learning_rate=1.0,
        sigma=params.sigma,
        ndcg_truncation=params.ndcg_truncation,
        max_pairs_rank=params.max_pairs_rank,
        eval_at=params.eval_at,
        empty_value=params.empty_query_ndcg,
        normalize=True,
    )


def unbiased_from_flags(
    engine: str,
    train: RankingDataset,
    params: LambdaMARTParams,
    unbiased: bool,
    propensities: Path | None,
    discount: str,
    max_weight: float | None,
    debias: str = "click-model",
) -> UnbiasedObjective:
    """`ltr train --unbiased [--debias click-model|position-bias|ipw|pairwise] [--propensities
    FILE] [--discount D] [--max-weight W]`, checked: ConfigError naming the flag for a bad
    combination."""
    from trainer.config import ConfigError

    if not unbiased:
        raise ConfigError("--propensities is used with --unbiased")
    if debias not in DEBIAS:
        raise ConfigError(f"--debias {debias!r}: choose one of {', '.join(DEBIAS)}")
    if debias != "ipw" and max_weight is not None:
        raise ConfigError(f"--max-weight clips IPW weights: not used with --debias {debias}")
    if debias in ("position-bias", "click-model") and discount != "log2":
        raise ConfigError(f"--discount {discount}: --debias {debias} uses log2 only")
    if propensities is None and (debias in ("ipw", "click-model") or discount != "log2"):
        why = "" if debias in ("ipw", "click-model") else f" for --discount {discount}"
        raise ConfigError(
            f"--unbiased needs --propensities FILE (from ltr dataset --from-logs){why}"
        )
    if engine != "native":
        raise ConfigError(f"--unbiased works with --engine native only, not {engine!r}")
    if discount not in DISCOUNTS:
        raise ConfigError(f"--discount {discount!r}: choose one of {', '.join(DISCOUNTS)}")
    if max_weight is not None and not max_weight >= 1.0:
        raise ConfigError(f"--max-weight {max_weight}: must be at least 1")
    chosen = cast(Literal["ctr", "theta", "log2"], discount)
    method = cast(Debias, debias)
    return click_objective(train, params, propensities, chosen, max_weight, method)
