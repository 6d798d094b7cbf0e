"""The quality gate: a candidate is published only if it is at least as good as what is deployed
(within a tolerance) on the same held-out queries, scores no NaN, and re-scores identically
through the service's scorer after export."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.artifacts.store import Artifact
from trainer.data.dataset import RankingDataset
from trainer.dataset_scoring import score_dataset
from trainer.metrics.report import ranking_report
from trainer.nightly.config import GateConfig


@dataclass
class GateResult:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    candidate: dict[str, Any] = field(default_factory=dict)
    deployed: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reasons": self.reasons,
            "notes": self.notes,
            "candidate": self.candidate,
            "deployed": self.deployed,
        }


def run_gate(
    candidate: Artifact,
    deployed: Artifact | None,
    holdout: RankingDataset,
    config: GateConfig,
    expected_scores: np.ndarray | None = None,
    user_vectors: np.ndarray | None = None,
    deployed_error: str | None = None,
) -> GateResult:
    """`expected_scores`: the trainer's own scores of `holdout` before export, float64 [n_docs].
    `deployed_error`: why the deployed model (CURRENT) did not load, when it did not.

    Fails closed: a candidate that cannot be compared with a deployed model is refused unless
    `config` opts in, since "not comparable" is also what a broken feature pipeline looks like.
    """
    result = GateResult(passed=True)
    scores = score_dataset(candidate, holdout, user_vectors)
    if not np.all(np.isfinite(scores)):
        result.reasons.append(f"candidate scores {int(np.sum(~np.isfinite(scores)))} NaN/inf")
        result.passed = False
        return result
    if expected_scores is not None:
        scale = np.maximum(np.abs(expected_scores), 1.0)
        worst = float(np.max(np.abs(scores - expected_scores) / scale))
        result.candidate["rescore_max_rel_diff"] = worst
        if worst > config.rescore_tolerance:
            result.reasons.append(
                f"exported model re-scores differently (max relative diff {worst:.3g} > "
                f"{config.rescore_tolerance:g})"
            )
            result.passed = False
    result.candidate.update(ranking_report(scores, holdout.labels, holdout.group_offsets))
    metric = config.metric or "ndcg@10"
    if metric not in result.candidate:
        raise ValueError(f"gate metric {metric!r} is not one of {sorted(result.candidate)}")
    unlabelled = _no_positive_label(holdout)
    if deployed is None and deployed_error is not None:
        text = f"the deployed model does not load ({deployed_error})"
        _without_comparison(result, text, config.allow_broken_deployed, "allow_broken_deployed")
        return _note(result, unlabelled)
    if deployed is None:
        result.notes.append("no deployed model: the candidate is compared to nothing")
        return _note(result, unlabelled)
    try:
        old = score_dataset(deployed, holdout, user_vectors)
    except ValueError as exc:
        text = f"deployed model {deployed.manifest.version} cannot score the held-out rows: {exc}"
        _without_comparison(result, text, config.allow_feature_change, "allow_feature_change")
        return _note(result, unlabelled)
    result.deployed = {
        "version": deployed.manifest.version,
        **ranking_report(old, holdout.labels, holdout.group_offsets),
    }
    if unlabelled is not None:
        # Every ranking scores the same on it (DCG 0, NDCG/MAP/MRR the empty-list value): a
        # pass would say nothing. A few lists with a positive label still compare, as usual.
        result.passed = False
        result.reasons.append(
            f"{unlabelled}: nothing to compare on ({metric} is "
            f"{float(result.candidate[metric]):.4g} for any ranking); check the data export or, "
            "for click logs, that the service receives feedback (POST /feedback)"
        )
        return result
    new_value = float(result.candidate[metric])
    old_value = float(result.deployed[metric])
    allowed = config.tolerance + config.relative_tolerance * abs(old_value)
    if new_value < old_value - allowed:
        result.passed = False
        result.reasons.append(
            f"{metric} {new_value:.4f} is below the deployed model's {old_value:.4f} "
            f"minus tolerance {allowed:.4g}"
        )
    return result


def _no_positive_label(holdout: RankingDataset) -> str | None:
    """Why the held-out labels cannot tell two rankings apart, or None when they can: no list
    has a positive label (click logs whose held-out lists got no click, or all-zero labels)."""
    if np.any(holdout.labels > 0):
        return None
    return (
        f"the held-out set's {holdout.num_queries} lists have no positive label "
        "(from click logs: no clicks)"
    )


def _note(result: GateResult, unlabelled: str | None) -> GateResult:
    """A run that compares nothing (nothing deployed, or an opt-in) still says its held-out
    metrics are empty."""
    if unlabelled is not None:
        result.notes.append(f"{unlabelled}: the candidate's metrics on it say nothing")
    return result


def _without_comparison(result: GateResult, text: str, allowed: bool, key: str) -> None:
    """The candidate cannot be compared with the deployed model: a note when the operator
    opted in (`gate.<key>`), else a refusal that says how to opt in."""
    if allowed:
        result.notes.append(f"{text}; not compared (gate.{key})")
        return
    result.passed = False
    flag = "--" + key.replace("_", "-")
    result.reasons.append(
        f"{text}: nothing to compare the candidate with; set gate.{key} = true (or {flag}) "
        "to publish it anyway"
    )
