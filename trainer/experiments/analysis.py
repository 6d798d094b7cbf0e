"""An experiment's statistics from its credit: totals, preference, tests, and the cumulative
preference over time (for the report's plot)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer.experiments.credit import ExperimentCredit, arm_totals
from trainer.experiments.statistics import (
    ABMetricResult,
    InterleavingResult,
    ab_result,
    interleaving_result,
)

SERIES_POINTS = 200
AB_METRICS = ("clicks", "dcg")


@dataclass(frozen=True)
class ExperimentAnalysis:
    mode: str
    impressions: int
    interleaving: InterleavingResult | None
    ab: dict[str, ABMetricResult] | None
    arm_impressions: dict[str, int] | None
    # (unix time, impressions so far, cumulative preference or click difference)
    series: list[tuple[float, int, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "impressions": self.impressions,
            "interleaving": None if self.interleaving is None else self.interleaving.to_json(),
            "ab": None if self.ab is None else {k: v.to_json() for k, v in self.ab.items()},
            "arm_impressions": self.arm_impressions,
            "series": [list(p) for p in self.series],
        }


def _sample(m: int) -> np.ndarray:
    return np.unique(np.linspace(0, m - 1, min(m, SERIES_POINTS)).round().astype(np.int64))


def analyse(credit: ExperimentCredit) -> ExperimentAnalysis:
    m = credit.impressions
    if credit.spec.mode == "interleave":
        clicked = credit.outcomes[credit.clicked]
        result = interleaving_result(
            clicked, impressions=m, differences=credit.differences[credit.clicked]
        )
        series = []
        if m:
            s = np.where(credit.clicked, credit.outcomes, 0).astype(np.float64)
            n_clicked = np.maximum(np.cumsum(credit.clicked), 1)
            pref = np.cumsum(s) / n_clicked / 2
            series = [(float(credit.ts[i]), int(i + 1), float(pref[i])) for i in _sample(m)]
        return ExperimentAnalysis("interleave", m, result, None, None, series)
    n_units = int(credit.units.max()) + 1 if m else 0
    results = {}
    for metric in AB_METRICS:
        values = credit.clicks if metric == "clicks" else credit.dcg
        results[metric] = ab_result(
            metric,
            arm_totals(credit.units, credit.arms, values, 0, n_units),
            arm_totals(credit.units, credit.arms, values, 1, n_units),
        )
    arms = {"control": int((credit.arms == 0).sum()), "candidate": int((credit.arms == 1).sum())}
    series = []
    if m:
        cand = credit.arms == 1
        n_t = np.maximum(np.cumsum(cand), 1)
        n_c = np.maximum(np.cumsum(~cand), 1)
        diff = np.cumsum(credit.clicks * cand) / n_t - np.cumsum(credit.clicks * ~cand) / n_c
        series = [(float(credit.ts[i]), int(i + 1), float(diff[i])) for i in _sample(m)]
    return ExperimentAnalysis("ab", m, None, results, arms, series)
