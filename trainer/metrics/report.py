"""The standard offline report: NDCG@1/3/5/10, MAP, MRR, ERR@10 and DCG@10 over the same
ranking."""

from __future__ import annotations

import numpy as np

from trainer.metrics.average_precision import average_precision_of
from trainer.metrics.err import err_of
from trainer.metrics.ndcg import dcg_of, ndcg_of
from trainer.metrics.ordering import ideal_ranking, rank_by_score
from trainer.metrics.reciprocal_rank import reciprocal_rank_of

NDCG_CUTOFFS = (1, 3, 5, 10)


def ranking_report(
    scores: np.ndarray,
    labels: np.ndarray,
    group_offsets: np.ndarray,
    empty_value: float = 1.0,
    ndcg_at: int | None = None,
) -> dict[str, float | int]:
    """Means over queries of `ndcg@1`, `ndcg@3`, `ndcg@5`, `ndcg@10`, `map`, `mrr`, `err@10`,
    `dcg@10` (not normalised: the metric of IPW-labelled clicks, clicks.ipw_eval), plus
    `queries` and `documents` counts.

    scores, labels: [n_docs]; group_offsets: int [n_queries + 1]. NDCG, MAP and MRR give
    `empty_value` to a query with no relevant document (NDCG: no label > 0; MAP and MRR: no
    label >= 1), where they are 0/0 or undefined; 1, the default, is LightGBM's convention for
    its ndcg@k and map@k. ERR and DCG are 0 there, by their definitions. ERR's max grade is the
    largest label present. `ndcg_at` adds NDCG at that cutoff too (a training run's
    validation metric, `--eval-at`).
    """
    ranked = rank_by_score(scores, labels, group_offsets)
    ideal = ideal_ranking(ranked.labels, ranked.group_offsets)
    cutoffs = sorted({*NDCG_CUTOFFS, *(() if ndcg_at is None else (ndcg_at,))})
    report: dict[str, float | int] = {
        f"ndcg@{k}": float(np.mean(ndcg_of(ranked, ideal, k, empty_value))) for k in cutoffs
    }
    report["map"] = float(np.mean(average_precision_of(ranked, empty_value=empty_value)))
    report["mrr"] = float(np.mean(reciprocal_rank_of(ranked, empty_value=empty_value)))
    report["err@10"] = float(np.mean(err_of(ranked, 10)))
    report["dcg@10"] = float(np.mean(dcg_of(ranked, 10)))
    report["queries"] = ranked.num_queries
    report["documents"] = int(ranked.labels.size)
    return report
