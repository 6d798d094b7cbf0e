"""Which debiasing objective `ltr train --unbiased` (and the nightly job on click logs) boosts,
chosen from the flags, with the rules on combining flags checked in one place.

The objectives themselves live one per module: IPW lambdas (lambdamart.unbiased), the
position-based click model's likelihood (lambdamart.click_likelihood, the default), position-bias
factors (lambdamart.position_bias_factors) and Hu et al. 2019's pairwise debiasing
(lambdamart.pairwise_debias). This module imports them; none of them imports it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from trainer.clicks.propensity import load_propensities
from trainer.config import ConfigError
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.lambdamart.click_likelihood import ClickLikelihoodObjective
from trainer.lambdamart.pairwise_debias import PairwiseDebiasObjective
from trainer.lambdamart.params import LambdaMARTParams
from trainer.lambdamart.position_bias_factors import PositionBiasObjective
from trainer.lambdamart.unbiased import (
    UnbiasedObjective,
    fit_power_discount,
    ipw_weights,
    power_discount,
)

DISCOUNTS = ("log2", "ctr", "theta")
DEBIAS = ("ipw", "pairwise", "position-bias", "click-model")
Debias = Literal["ipw", "pairwise", "position-bias", "click-model"]
Discount = Literal["ctr", "theta", "log2"]


class DebiasFlagError(ConfigError, DataFormatError):
    """Debiasing options that cannot be combined. A ConfigError (the CLI answers it as a usage
    error naming the flag) and a DataFormatError (the nightly job reads the same options from its
    data config and reports them as such)."""


def check_debias_flags(
    debias: str, discount: str, propensities: Path | None, max_weight: float | None
) -> tuple[Debias, Discount]:
    """The rules, in the order a user meets them; the message names the flag."""
    if debias not in DEBIAS:
        raise DebiasFlagError(f"--debias {debias!r}: choose one of {', '.join(DEBIAS)}")
    if discount not in DISCOUNTS:
        raise DebiasFlagError(f"--discount {discount!r}: choose one of {', '.join(DISCOUNTS)}")
    if debias != "ipw" and max_weight is not None:
        raise DebiasFlagError(f"--max-weight clips IPW weights: not used with --debias {debias}")
    if max_weight is not None and not max_weight >= 1.0:
        raise DebiasFlagError(f"--max-weight {max_weight}: must be at least 1")
    if max_weight is not None and not math.isfinite(max_weight):
        raise DebiasFlagError(
            f"--max-weight {max_weight}: must be a finite number (leave it out for no clip)"
        )
    if debias in ("position-bias", "click-model") and discount != "log2":
        raise DebiasFlagError(
            f"--discount {discount}: --debias {debias} uses log2 only; use log2 (the default)"
        )
    if propensities is None and (debias in ("ipw", "click-model") or discount != "log2"):
        why = "" if debias in ("ipw", "click-model") else f" for --discount {discount}"
        raise DebiasFlagError(
            f"--debias {debias} needs propensities: --unbiased needs --propensities FILE "
            f"(from ltr dataset --from-logs){why}"
        )
    return cast(Debias, debias), cast(Discount, discount)


def click_objective(
    train: RankingDataset,
    params: LambdaMARTParams,
    propensities: Path | None,
    discount: Discount = "log2",
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
    discount ("log2"), the power law fitted to the file's CTR by position ("ctr", Wang et al.
    2018) or the theta curve itself ("theta"). log2 is the default: on the benchmark the fitted
    curves did not help NDCG@10 (bench/results/position_bias.md)."""
    check_debias_flags(debias, discount, propensities, max_weight)
    if train.positions is None:
        raise DataFormatError(
            f"{train.source}: --unbiased needs the served position of every row "
            "(a `position` column, as `ltr dataset --from-logs` writes)"
        )
    if debias == "position-bias":
        return _position_bias(train, params)
    if debias == "click-model":
        assert propensities is not None  # check_debias_flags
        return _click_model(train, params, propensities)
    if propensities is None:  # pairwise with the log2 discount
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
    FILE] [--discount D] [--max-weight W]`, checked: a DebiasFlagError naming the flag for a bad
    combination."""
    if not unbiased:
        raise DebiasFlagError("--propensities is used with --unbiased")
    chosen_debias, chosen_discount = check_debias_flags(debias, discount, propensities, max_weight)
    if engine != "native":
        raise DebiasFlagError(f"--unbiased works with --engine native only, not {engine!r}")
    return click_objective(train, params, propensities, chosen_discount, max_weight, chosen_debias)
